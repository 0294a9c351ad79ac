"""Render a request into a run directory: the user's source file(s) and ``harness.py``.

The one template, ``templates/harness.py.j2`` (the repository's top-level folder; a wheel
ships it inside the package), writes the request as SPEC (``spec.py``) and a call into the
measuring program (``program.py``); what a language adds is its adapter's
(``languages/``), run by that program.
"""

from __future__ import annotations

import pprint
from pathlib import Path

import jinja2

import nsight_agent.kernelbench as kernelbench
from nsight_agent.engine import process
from nsight_agent.engine.harness.spec import Spec, VariantSpec
from nsight_agent.errors import NsightAgentError
from nsight_agent.request import TIME_METRIC, ProfileRequest

TEMPLATE = "harness.py.j2"
MAIN_MODULE = "user_source"
# The pre-flight's per-call runs per config at least (harness/call_loop.py): a verdict on
# per-call time needs as many samples as the measured runs give a GPU time.
MIN_CALL_RUNS = 10


def template_dirs() -> list[Path]:
    """Where templates are looked for: the checkout's ``templates/`` (source tree, editable
    install), then the copy a wheel ships inside the package (``nsight_agent/templates``)."""
    return [process.PACKAGE_ROOT / "templates", process.PACKAGE_ROOT / "nsight_agent" / "templates"]


def templates_dir() -> Path:
    for folder in template_dirs():
        if (folder / TEMPLATE).is_file():
            return folder
    return template_dirs()[0]


def environment() -> jinja2.Environment:
    folder = templates_dir()
    if not (folder / TEMPLATE).is_file():
        raise NsightAgentError(
            f"The harness templates are missing: no {TEMPLATE} in "
            + ", ".join(map(str, template_dirs())),
            "Reinstall nsight-agent (the wheel ships nsight_agent/templates), or run from a "
            "clone of the repository.",
        )
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # renders Python, not HTML
    )


def spec_for(request: ProfileRequest, cuda_cache: Path) -> tuple[Spec, dict[str, str]]:
    """The harness's SPEC and the source files to write beside it (file name -> text)."""
    files = {f"{MAIN_MODULE}.py": request.source}
    variants: list[VariantSpec] = []
    for i, v in enumerate(request.effective_variants()):
        module = MAIN_MODULE
        if v.source is not None and v.source != request.source:
            module = f"variant_{i}"
            files[f"{module}.py"] = v.source
        variants.append(
            {"name": v.name, "entry": v.entry, "module": module, "file": f"{module}.py"}
        )
    if request.cuda_source is not None:
        files["kernel.cu"] = request.cuda_source
    kb, calls = request.correctness == "kernelbench", call_runs(request)
    spec: Spec = {
        "language": request.language,
        "setup_module": MAIN_MODULE,
        "setup": request.setup,
        "variants": variants,
        "baseline": request.baseline_name(),
        "configs": request.expanded_configs(),
        "runs": request.runs,
        "warmup": request.warmup,
        "seed": request.seed,
        "torch_ranges": request.torch_ranges,
        "sample_launches": request.sample_launches,
        "vary_inputs": request.vary_inputs,
        "rtol": request.rtol,
        "atol": request.atol,
        # correctness="kernelbench": its trials after the first check, its bounds in every
        # check, and its timed trials in the pre-flight
        "trials": request.num_correct_trials if kb else 0,
        "call_runs": calls,
        "perf_trials": request.num_perf_trials if kb and calls else 0,
        "flush_l2": request.cache_control == "all",
        "tolerances": kernelbench.tolerances(request.rtol, request.atol) if kb else None,
        "compile_options": {},
        "cuda": {
            "source": request.cuda_source,
            "functions": list(request.cuda_functions),
            "cache_dir": str(cuda_cache),
        },
    }
    return spec, files


def call_runs(request: ProfileRequest) -> int:
    """The pre-flight's per-call runs per config: the request's runs, at least
    ``MIN_CALL_RUNS``, where a call's time is asked for; none for a counter collection
    (sections: a roofline, a diagnosis) or a sampled step, which judge no variant's time."""
    if request.sections or request.sample_launches or TIME_METRIC not in request.metrics:
        return 0
    return max(request.runs, MIN_CALL_RUNS)


def render(spec: Spec) -> str:
    """The harness program's text; checked to be valid Python."""
    text = (
        environment()
        .get_template(TEMPLATE)
        .render(
            language=spec["language"],
            # The spec holds only dicts, lists, str, numbers, bools and None: pformat writes
            # them as a valid (and readable) Python literal.
            spec_literal=pprint.pformat(spec, sort_dicts=False, width=96),
        )
    )
    compile(text, "harness.py", "exec")  # a template bug fails here, not in the child
    return text


def write_run_files(request: ProfileRequest, run_dir: Path, cuda_cache: Path) -> Path:
    """Write the sources and the rendered harness into ``run_dir``; return the harness path."""
    spec, files = spec_for(request, cuda_cache)
    for name, text in files.items():
        (run_dir / name).write_text(text)
    harness = run_dir / "harness.py"
    harness.write_text(render(spec))
    return harness
