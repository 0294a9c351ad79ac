"""The measuring program of a rendered ``harness.py``: ``main(SPEC, argv)`` measures every
(variant, config, run) of a request in one process, the same under ncu, in a pre-flight
(``--preflight``) and on a pre-launched target.

    load        the user's sources through the language's adapter (``sources.load``, the
                loader the timing worker calls too)
    per config
      inputs    do two seeds build different inputs? else every run's are refilled
      first     each variant once on fresh inputs of one seed, outside any range: compiles
                and warms up, and its outputs are judged (``verdicts.py``, as the timing
                loop judges them); the pre-flight counts its kernels
      trials    correctness="kernelbench": its seeded trials on top
      warm-up   ``warmup`` calls of each variant on inputs of its own
      runs      the measured calls: one NVTX call range per variant and run, variants
                interleaved (``runtime.run_order``), each on inputs of a new seed built
                outside the ranges, every run's outputs judged
      timed     the pre-flight on a GPU: each call timed end to end, and KernelBench's
                trials where asked (``call_loop.py``), outside every profiler
    manifest    what was called, checked, dropped and suspected (``manifest.json``, read by
                ``collection/preflight_run.py`` and ``collection/measure.py``)

Under ncu only the NVTX ranges opened around each entry call are profiled: set-up, first
calls, warm-up and checks run outside them. ``--gate FILE``: started beside the pre-flight,
wait for its verdict before any user code is imported (``collection/collect/early.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nvtx

from nsight_agent.annotation import CALL_DOMAIN, CALL_STATE, annotate
from nsight_agent.engine.harness import (
    call_loop,
    call_markers,
    gpu_activity,
    integrity,
    program_io,
    runtime,
    sources,
)
from nsight_agent.engine.harness.call_time import CallClock
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.harness.languages import kernelbench
from nsight_agent.engine.harness.spec import Spec, VariantSpec
from nsight_agent.engine.harness.verdicts import Tolerance, Verdicts
from nsight_agent.stages import config_run


def main(spec: Spec, argv: Sequence[str] | None = None) -> int:
    """Run the program (``argv``: the harness's arguments, default ``sys.argv[1:]``); 0, or
    ``program_io.ERROR_EXIT`` after writing the error file."""
    args = program_io.parse_args(list(sys.argv[1:] if argv is None else argv))
    files = program_io.Files(args.prefix)
    try:
        Program(spec, args, files).run()
    except SourceError as err:
        files.write_error(err)
        return program_io.ERROR_EXIT
    except BaseException as exc:
        files.write_error(program_io.unexpected(exc))
        return program_io.ERROR_EXIT
    return 0


class Program:
    """One run of the program: its spec, arguments, files and manifest, and the sources."""

    variants: list[VariantSpec]  # those not skipped
    loaded: sources.Loaded
    dropped: runtime.Dropped  # variants that failed alone, from their import on
    runs: int  # measured runs per config (none where the entries do not run here)
    total: int  # measured calls, for the progress file

    def __init__(self, spec: Spec, args: program_io.Args, files: program_io.Files) -> None:
        self.spec, self.args, self.files = spec, args, files
        self.device = args.device
        self.manifest = files.manifest
        self.tolerance = Tolerance(spec["rtol"], spec["atol"], spec["tolerances"])
        self.clock: CallClock | None = None

    def run(self) -> None:
        if self.args.gate:  # started beside the pre-flight: its verdict first
            skip = program_io.wait_for_gate(self.args.gate, self.args.device)
            if skip is None:
                return
            self.args.skip = skip
        if call_loop.wanted(self.spec, self.args.preflight, self.device):
            self.clock = CallClock(self.device, self.spec["flush_l2"])  # before user code
        self.load()
        for ci, config in enumerate(self.spec["configs"]):
            self.config(ci, config)
        if runtime.LOST_CALLS:  # those calls are not counted; the others' counts stand
            lost = runtime.LOST_CALLS
            what = "those calls' kernels were not counted"
            self.manifest["notes"].append(gpu_activity.lost_note(sum(lost), len(lost), what))
            self.files.write_manifest()

    # --- load ------------------------------------------------------------------------------

    def load(self) -> None:
        """The sources through the loader both methods call, and the manifest's start: it is
        written only once they loaded (a manifest missing means the import ended the process)."""
        spec, manifest = self.spec, self.manifest
        self.variants = [v for v in spec["variants"] if v["name"] not in self.args.skip]
        manifest.update(mode="preflight" if self.args.preflight else "profile", device=self.device)
        manifest.update(language=spec["language"], configs=spec["configs"], runs=spec["runs"])
        manifest.update(warmup=spec["warmup"], baseline=spec["baseline"])
        manifest.update(variants=[v["name"] for v in self.variants], calls=[], checks=[], notes=[])
        manifest.update(skipped=list(self.args.skip), suspects=[], out_bytes=[], first_kernels=[])
        manifest.update(call_ns=[], kernelbench_ns=[])
        self.loaded = loaded = sources.load(spec, Path.cwd(), self.device, self.args.skip)
        self.dropped = loaded.dropped
        manifest.update(dropped=loaded.dropped, builds=loaded.builds)
        note = loaded.import_note()
        if note:
            manifest["notes"].append(f"the source {note}")
            for ci in range(len(spec["configs"])):
                for name in loaded.entries:
                    self.suspect(name, ci, note)
        manifest["notes"] += loaded.prepared.notes
        if loaded.prepared.cuda_build is not None:
            manifest["cuda_build"] = loaded.prepared.cuda_build
        self.files.write_manifest()
        runs = min(spec["runs"], 2) if self.args.preflight else spec["runs"]
        self.runs = runs if loaded.prepared.run_entries else 0
        self.total = len(spec["configs"]) * len(self.variants) * runs

    def live(self) -> list[VariantSpec]:
        return [v for v in self.variants if v["name"] not in self.dropped]

    def suspect(self, name: str, ci: int, reason: str) -> None:
        self.manifest["suspects"].append({"variant": name, "config_index": ci, "reason": reason})

    def replaced_by(self, name: str, ci: int) -> None:
        """A guarded function the call just made replaced: the variant is suspect, and the
        original is put back before the next call."""
        replaced = self.loaded.guard.replaced()
        if replaced:
            self.suspect(name, ci, integrity.replaced_note(replaced))

    def inputs(self, ci: int, config: dict[str, Any], seed: int, name: str | None) -> Any:
        with runtime.stage("setup", name, ci):
            runtime.seed_all(seed)
            return runtime.build_inputs(self.loaded.setup, config, self.device)

    # --- one config ------------------------------------------------------------------------

    def config(self, ci: int, config: dict[str, Any]) -> None:
        base = self.spec["baseline"]
        verdicts = Verdicts(base, self.tolerance, ci, config, self.dropped, self.manifest["checks"])
        vary = self.inputs_vary(ci, config)
        self.first_calls(ci, config, verdicts)
        if self.spec["trials"] and self.loaded.prepared.run_entries:
            entries = {v["name"]: self.loaded.entries[v["name"]] for v in self.live()}
            kernelbench.trials(
                self.loaded.setup,
                entries,
                verdicts,
                device=self.device,
                seed=self.spec["seed"],
                after_call=lambda name: self.replaced_by(name, ci),
                count=self.spec["trials"],
            )
        self.files.write_manifest()
        self.warm_up(ci, config)
        self.measured_runs(ci, config, vary, verdicts)
        if self.clock is not None:
            call_loop.after_runs(self, self.clock, ci, config, vary, verdicts)
        self.files.write_manifest()

    def inputs_vary(self, ci: int, config: dict[str, Any]) -> bool:
        """Inputs that really change: if two seeds build the same values, setup ignores the
        seed, and every run's floating-point inputs are refilled from its own seed
        (constant ones, buffers, stay as set up)."""
        seed = self.spec["seed"]
        first = self.inputs(ci, config, seed, None)
        vary = self.spec["vary_inputs"] and integrity.seed_ignored(
            first, self.inputs(ci, config, seed + 1, None)
        )
        note = integrity.vary_note(first) if vary else None
        if note and note not in self.manifest["notes"]:
            self.manifest["notes"].append(note)
        return bool(vary)

    def first_calls(self, ci: int, config: dict[str, Any], verdicts: Verdicts) -> None:
        """Each variant once on fresh inputs of one seed, outside any range, then judged. The
        call also warms up (Triton compile/autotune, torch.compile, lazy loading). The
        pre-flight counts its kernels too: a variant that launches kernels here and none
        when measured returns a result kept from this call."""
        inputs, outputs, first = {}, {}, {}
        where = self.device if self.args.preflight else "cpu"
        for v in self.live():
            name = v["name"]
            inputs[name] = self.inputs(ci, config, self.spec["seed"], name)
            if not self.loaded.prepared.run_entries:
                continue
            with self.dropped.isolate(name, "entry", ci):
                entry = self.loaded.entries[name]
                outputs[name], kernels, _ = runtime.call_counting_kernels(
                    entry, inputs[name], where
                )
                runtime.synchronize(self.device)
                if kernels is not None:
                    first[name] = len(kernels)
            self.replaced_by(name, ci)
        self.manifest["first_kernels"].append(first)
        outputs = {n: o for n, o in outputs.items() if n not in self.dropped}
        with runtime.stage("check", self.spec["baseline"], ci):
            self.manifest["out_bytes"].append(
                {n: integrity.output_bytes(o) for n, o in outputs.items()}
            )
            verdicts.judge(outputs, inputs, every=True)
            for name, out in outputs.items():
                problem = integrity.plain_output_problem(out)
                if problem:
                    self.suspect(name, ci, problem)

    def warm_up(self, ci: int, config: dict[str, Any]) -> None:
        """Each variant's ``warmup`` calls on inputs of its own (compile, autotune, caches)."""
        for v in self.live() if self.loaded.prepared.run_entries else []:
            name = v["name"]
            args = self.inputs(ci, config, self.spec["seed"], name)
            with self.dropped.isolate(name, "entry", ci):
                for _ in range(self.spec["warmup"]):
                    runtime.call(self.loaded.entries[name], args)
                runtime.synchronize(self.device)
            self.replaced_by(name, ci)
            del args

    # --- the measured runs -----------------------------------------------------------------

    def measured_runs(
        self, ci: int, config: dict[str, Any], vary: bool, verdicts: Verdicts
    ) -> None:
        """One NVTX call range per variant and run, variants interleaved (A B, then B A,
        rotating: ``runtime.run_order``) so drift and place cancel. Every run gets inputs of
        a new seed, built outside the ranges, and its outputs are judged against the
        baseline's on the same inputs: a variant that memoises, caches or returns a stale
        result fails, it is not timed. A variant already wrong on this config is not
        reported again. The previous run's outputs stay alive, so an output at the same
        address is a returned cache."""
        watch = integrity.StorageWatch()
        for run in range(self.runs):
            inputs, outputs = {}, {}
            names = [v["name"] for v in self.live()]
            for name in runtime.run_order(names, run):
                seed = self.spec["seed"] + 1 + run
                inputs[name] = self.inputs(ci, config, seed, name)
                with runtime.stage("setup", name, ci):
                    if vary:
                        integrity.vary(inputs[name], seed)
                    if self.device.startswith("cuda"):
                        integrity.reset_persisting_l2()
                    runtime.synchronize(self.device)
                with self.dropped.isolate(name, "entry", ci):
                    outputs[name] = self.measured_call(ci, run, name, inputs[name])
                self.replaced_by(name, ci)
            runtime.synchronize(self.device)  # side streams too, before the outputs are read
            outputs = {n: o for n, o in outputs.items() if n not in self.dropped}
            with runtime.stage("check", self.spec["baseline"], ci):
                verdicts.judge(outputs, inputs, f"run {run}, on new inputs")
                for name, out in outputs.items():
                    reused = watch.reused(name, out)
                    if reused and not verdicts.failed(name):
                        self.suspect(name, ci, f"run {run}: {reused}")
            del inputs, outputs
        del watch

    def measured_call(self, ci: int, run: int, name: str, inputs: Any) -> Any:
        """One measured call inside its NVTX call range (and, on a pre-launched target, its
        call markers), recorded in the manifest's calls; its outputs."""
        calls, preflight = self.manifest["calls"], self.args.preflight
        CALL_STATE.reset()
        index = len(calls)
        # what a launch-sampled ncu run is weighed by (collection/launch_sampling.py)
        sampled = self.spec["sample_launches"] and preflight and self.device.startswith("cuda")
        launches: list[list[Any]] | None = [] if sampled else None
        ranges = self.spec["torch_ranges"] and self.args.op_ranges and not preflight
        rid = nvtx.start_range(f"call={index}", domain=CALL_DOMAIN)
        try:
            # call markers: only where NVTX is lost (a pre-launched target)
            with (
                annotate(name),
                runtime.op_ranges(ranges),
                call_markers.around(index, self.device),
            ):
                out, kernels, copies_ns = runtime.call_counting_kernels(
                    self.loaded.entries[name], inputs, self.device if preflight else "cpu", launches
                )
        finally:
            nvtx.end_range(rid)
        calls.append(
            {
                "call": index,
                "config": ci,
                "run": run,
                "variant": name,
                "annotations": list(CALL_STATE.opened),
                "failed": list(CALL_STATE.failed),
                "kernels": kernels,
                "copies_ns": copies_ns,
                **({"launches": launches} if launches is not None else {}),
            }
        )
        configs = len(self.spec["configs"])
        said = config_run(ci, configs, run, self.runs, name)
        self.files.progress(len(calls), self.total, said)
        return out
