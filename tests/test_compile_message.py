"""A failed extension build is told by the compiler's own lines: torch's
message starts with ninja's command lines, which would fill any short error row."""

from __future__ import annotations

from nsight_agent.engine.harness.ext_builds import compile_message

TORCH_OUTPUT = """Traceback (most recent call last):
  File "variant_1.py", line 4, in <module>
RuntimeError: Error building extension 'fast_matmul_ab12': [1/2] c++ -MMD -MF main.o.d \
-DTORCH_EXTENSION_NAME=fast_matmul_ab12 -isystem /x/include -fPIC -std=c++17 -O0 -c main.cpp
FAILED: main.o
c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=fast_matmul_ab12 -c main.cpp -o main.o
main.cpp: In function 'int64_t tag()':
main.cpp:3:34: error: 'is' was not declared in this scope
main.cpp:3:37: error: expected ';' before 'not'
ninja: build stopped: subcommand failed.
"""


def test_the_compiler_s_error_lines_are_kept_and_ninja_s_commands_dropped() -> None:
    message = compile_message(TORCH_OUTPUT)
    assert message.startswith("main.cpp:3:34: error: 'is' was not declared"), message
    assert "main.cpp:3:37: error: expected ';'" in message
    assert "-MMD" not in message and "Traceback" not in message


def test_without_error_lines_the_last_lines_stand() -> None:
    assert compile_message("a\nb\n\nc\n", most=2) == "b | c"


# A build that failed before any compiler ran (no CUDA toolkit), as the child's log holds it.
NO_TOOLKIT = """Traceback (most recent call last):
  File "variant_1.py", line 27, in <module>
    matmul_module = load_inline(
  File "cpp_extension.py", line 2345, in _join_cuda_home
    raise OSError('CUDA_HOME environment variable is not set. '
OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.
  File "runtime.py", line 140, in load_user_module
    raise SourceError(
nsight_agent.engine.harness.errors.SourceError: import
"""


def test_a_failure_before_the_compiler_is_told_by_its_error_not_by_our_frames() -> None:
    message = compile_message(NO_TOOLKIT)
    assert message == (
        "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA "
        "install root."
    ), message
