// The Python harness that code_exec runs inside the sandbox (sandbox.h). It reads
// task.json from its cwd, runs the program, the setup code and each test in
// one module namespace, and writes one JSON line to fd 3:
//   {"program_error": null | "<Type>: <msg>", "setup_error": ...,
//    "tests": [{"ok": true|false, "error": null | "<Type>: <msg>"}, ...]}
// Each test runs separately (an exception or a per-test timeout fails that test
// only). For HumanEval ("check" set), the check(candidate) function's body is
// split into top-level statements with ast: statements that contain an assert are
// tests, the others are setup run in order (a failing setup statement is
// reported and later tests run anyway); if the body cannot be split (e.g. a
// `return`), check(candidate) is one test.
// Processes the program forks never report (only the harness's own pid writes).
// When TITAN_SANDBOX_NETNS is not "1" (no network namespace), socket creation is
// made to fail at the Python level (best effort: _socket stays importable).
#include "titan/rl/code_exec.h"

namespace titan::rl {

const char* code_exec_harness_source() {
  return R"PY(
import os, sys
_MAIN_PID = os.getpid()
_RESULT_FD = os.dup(3)
os.close(3)
import json as _json, signal as _signal
_dumps, _write, _getpid, _exit = _json.dumps, os.write, os.getpid, os._exit

if os.environ.get("TITAN_SANDBOX_NETNS") != "1":
    import socket as _socket_mod
    class _NoSocket(_socket_mod.socket):
        def __init__(self, *a, **k):
            raise OSError("network access is disabled in this sandbox")
    _socket_mod.socket = _NoSocket
    _socket_mod.create_connection = lambda *a, **k: _NoSocket()

class _TestTimeout(BaseException):
    pass

def _on_alarm(signum, frame):
    raise _TestTimeout("test timed out")

def _describe(e):
    msg = str(e)
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return type(e).__name__ + (": " + msg if msg else "")

with open("task.json", "r", encoding="utf-8") as f:
    _task = _json.load(f)
_test_timeout = float(_task.get("test_timeout_s") or 0)
if _test_timeout > 0:
    _signal.signal(_signal.SIGALRM, _on_alarm)

def _run(code, g, name):
    """Runs code (str or code object) in g; returns None or an error string."""
    try:
        if _test_timeout > 0:
            _signal.setitimer(_signal.ITIMER_REAL, _test_timeout)
        try:
            if isinstance(code, str):
                code = compile(code, name, "exec")
            exec(code, g)
        finally:
            if _test_timeout > 0:
                _signal.setitimer(_signal.ITIMER_REAL, 0)
        return None
    except BaseException as e:
        if _getpid() != _MAIN_PID:
            _exit(0)
        return _describe(e)

_result = {"program_error": None, "setup_error": None, "tests": []}
_g = {"__name__": "__main__", "__builtins__": __builtins__}

def _finish():
    if _getpid() != _MAIN_PID:
        _exit(0)
    _write(_RESULT_FD, (_dumps(_result) + "\n").encode())

def _fail_all(n, why):
    _result["tests"] = [{"ok": False, "error": why} for _ in range(n)]

_check = _task.get("check")
_tests = _task.get("tests") or []
_result["program_error"] = _run(_task.get("program", ""), _g, "<program>")
if _result["program_error"] is None and _task.get("setup"):
    _result["setup_error"] = _run(_task["setup"], _g, "<setup>")

if _check is None:
    if _result["program_error"] is not None:
        _fail_all(len(_tests), "program failed: " + _result["program_error"])
    else:
        for i, t in enumerate(_tests):
            err = _run(t, _g, "<test %d>" % i)
            _result["tests"].append({"ok": err is None, "error": err})
else:
    import ast as _ast
    entry = _check["entry_point"]
    try:
        mod = _ast.parse(_check["test"])
        fn = [n for n in mod.body if isinstance(n, _ast.FunctionDef) and n.name == "check"][0]
        param = fn.args.args[0].arg
        stmts = [(s, any(isinstance(n, _ast.Assert) for n in _ast.walk(s))) for s in fn.body]
        stmts = [(s, is_test) for s, is_test in stmts
                 if is_test or not (isinstance(s, _ast.Expr) and isinstance(s.value, _ast.Constant))]
        codes = [(compile(_ast.Module(body=[s], type_ignores=[]), "<check>", "exec"), is_test)
                 for s, is_test in stmts]
        if not any(is_test for _, is_test in codes):
            raise ValueError("check() has no assert")
    except Exception:
        codes = None
    n_tests = sum(1 for _, t in codes if t) if codes is not None else 1
    if _result["program_error"] is not None:
        _fail_all(n_tests, "program failed: " + _result["program_error"])
    else:
        err = _run(_check["test"], _g, "<test>")
        if err is not None:
            _fail_all(n_tests, "test code failed: " + err)
        elif entry not in _g:
            _fail_all(n_tests, "the program does not define " + entry)
        elif codes is None:
            err = _run("check(%s)" % entry, _g, "<check>")
            _result["tests"].append({"ok": err is None, "error": err})
        else:
            ns = dict(_g)
            ns[param] = _g[entry]
            for code, is_test in codes:
                err = _run(code, ns, "<check>")
                if is_test:
                    _result["tests"].append({"ok": err is None, "error": err})
                elif err is not None and _result["setup_error"] is None:
                    _result["setup_error"] = "check() statement failed: " + err
_finish()
)PY";
}

}  // namespace titan::rl
