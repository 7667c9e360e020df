// The Python harness that code_exec runs inside the sandbox (sandbox.h): the
// grader. It reads task.json from its cwd (and deletes it), starts the program in
// a process of its own (the worker: a fresh interpreter that runs the program and
// then answers calls), and runs the task's tests itself. The program's functions
// are proxies here: a call sends its arguments to the worker as data (JSON with
// tags for tuple, set, bytes, ...) and gets data back, or a reference for any
// other object (whose == is identity, so no object can claim to equal the
// expected value). The worker never sees the tests, and it has no way to the
// verdict: the grader is not dumpable (no ptrace, no /proc/<pid>/mem or fd), its
// result channel (fd 3) is not inherited, and only the grader writes it. The
// verdict is one JSON line on fd 3:
//   {"program_error": null | "<Type>: <msg>", "setup_error": ...,
//    "tests": [{"ok": true|false, "error": null | "<Type>: <msg>"}, ...]}
// Each test runs separately: an exception, the worker's death or a per-test
// timeout fails that test only (the worker is then started again for the next
// one). For HumanEval ("check" set), the task's prompt and check() run here with
// the entry point bound to the program's function; the body of check() is split
// into top-level statements with ast: statements that contain an assert are
// tests, the others are setup run in order; if the body cannot be split (e.g. a
// `return`), check(candidate) is one test.
#include "titan/rl/code_exec.h"

namespace titan::rl {

const char* code_exec_harness_source() {
  return R"PY(import os, sys
_RESULT_FD = os.dup(3)
os.close(3)
import ast, ctypes, decimal, fractions, importlib, json, select, subprocess, time

# Not dumpable: processes of the same uid cannot ptrace this one nor open its
# /proc/<pid>/{mem,fd}, so the program's process cannot reach the verdict.
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
    os.write(_RESULT_FD, b'{"grader_error": "prctl(PR_SET_DUMPABLE, 0) failed"}\n')
    os._exit(1)
with open("task.json", "r", encoding="utf-8") as _f:
    _task = json.load(_f)
os.unlink("task.json")  # gone before the program starts

_test_timeout = float(_task.get("test_timeout_s") or 0)
_MAX_REPLY = 16 << 20

WORKER = r'''
import os, sys
_req = os.fdopen(int(sys.argv[1]), "rb", buffering=0)
_resp = int(sys.argv[2])
import json as _json
_dumps, _loads, _write = _json.dumps, _json.loads, os.write
_objects = []
_TYPES = {t.__name__: t for t in (int, float, str, bool, bytes, complex, list, tuple, dict, set, frozenset)}
def _enc(x, depth=0):
    if depth > 200:
        raise ValueError("value nested too deep")
    if x is None or type(x) in (bool, int, float, str):
        return x
    d = depth + 1
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, str):
        return str(x)
    if isinstance(x, complex):
        return {"c": [complex(x).real, complex(x).imag]}
    if isinstance(x, (bytes, bytearray)):
        return {"b": bytes(x).hex()}
    if isinstance(x, tuple):
        return {"t": [_enc(v, d) for v in tuple.__iter__(x)]}
    if isinstance(x, list):
        return {"l": [_enc(v, d) for v in list.__iter__(x)]}
    if isinstance(x, frozenset):
        return {"f": [_enc(v, d) for v in frozenset.__iter__(x)]}
    if isinstance(x, set):
        return {"s": [_enc(v, d) for v in set.__iter__(x)]}
    if isinstance(x, dict):
        return {"d": [[_enc(k, d), _enc(v, d)] for k, v in dict.items(x)]}
    n = type(x).__module__ + "." + type(x).__qualname__
    if n == "decimal.Decimal":
        return {"D": str(x)}
    if n == "fractions.Fraction":
        return {"F": [x.numerator, x.denominator]}
    _objects.append(x)
    return {"r": len(_objects) - 1}
def _dec(x):
    if not isinstance(x, dict):
        return x
    (k, v), = x.items()
    if k == "r": return _objects[v]
    if k == "c": return complex(v[0], v[1])
    if k == "b": return bytes.fromhex(v)
    if k == "t": return tuple(_dec(e) for e in v)
    if k == "l": return [_dec(e) for e in v]
    if k == "f": return frozenset(_dec(e) for e in v)
    if k == "s": return set(_dec(e) for e in v)
    if k == "d": return {_dec(a): _dec(b) for a, b in v}
    if k == "T": return _TYPES[v]
    if k == "D":
        import decimal
        return decimal.Decimal(v)
    if k == "F":
        import fractions
        return fractions.Fraction(v[0], v[1])
    raise ValueError("bad value tag " + k)
def _describe(e):
    msg = str(e)
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return type(e).__name__ + (": " + msg if msg else "")
def _send(obj):
    data = (_dumps(obj) + "\n").encode()
    while data:
        data = data[_write(_resp, data):]
def _recv():
    line = _req.readline()
    if not line:
        os._exit(0)
    return _loads(line)
_g = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    exec(compile(_recv()["program"], "<program>", "exec"), _g)
    _names = {}
    for k, v in list(_g.items()):
        if not k.startswith("__"):
            _names[k] = {"module": v.__name__} if type(v).__name__ == "module" else {"value": _enc(v)}
    _send({"globals": _names})
except BaseException as e:
    _send({"program_error": _describe(e)})
    os._exit(0)
def _call(o, q):
    a, kw = _dec(q["args"]), _dec(q["kwargs"])
    r = o(*a, **kw)
    return r, a
_ops = {
    "call": _call,
    "getattr": lambda o, q: (getattr(o, q["name"]), None),
    "setattr": lambda o, q: (setattr(o, q["name"], _dec(q["value"])), None),
    "list": lambda o, q: (list(o), None),
    "len": lambda o, q: (len(o), None),
    "bool": lambda o, q: (bool(o), None),
    "str": lambda o, q: (str(o), None),
    "repr": lambda o, q: (repr(o), None),
    "getitem": lambda o, q: (o[_dec(q["key"])], None),
}
while True:
    q = _recv()
    try:
        r, a = _ops[q["op"]](_objects[q["ref"]], q)
        _send({"id": q["id"], "ok": _enc(r), "args": _enc(a)})
    except BaseException as e:
        try:
            _send({"id": q["id"], "err": _describe(e)})
        except BaseException:
            os._exit(1)
'''


def _describe(e):
    msg = str(e)
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return type(e).__name__ + (": " + msg if msg else "")


class ProgramError(Exception):
    """An exception raised in the program's process, or that process ending."""


class Worker:
    """The program in its own process; this process only sends it data and reads data back."""

    def __init__(self, program):
        self.proc = None
        self.buf = b""
        self.next_id = 0
        self.deadline = None
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-B", "-c", WORKER, str(req_r), str(resp_w)],
            stdin=subprocess.DEVNULL, pass_fds=(req_r, resp_w), close_fds=True)
        os.close(req_r)
        os.close(resp_w)
        self._send({"program": program})
        self.hello = self._recv()

    def _send(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.req_w, data):]
        except OSError:
            raise ProgramError(self._ended())

    def _ended(self):
        try:
            rc = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the program's process stopped answering"
        if rc < 0:
            return "the program's process was killed by signal %d" % -rc
        return "the program's process exited (exit code %d)" % rc

    def _recv(self):
        while b"\n" not in self.buf:
            timeout = None
            if self.deadline is not None:
                timeout = self.deadline - time.monotonic()
                if timeout <= 0:
                    self.kill()
                    raise TimeoutError("test timed out")
            ready, _, _ = select.select([self.resp_r], [], [], timeout)
            if not ready:
                continue
            chunk = os.read(self.resp_r, 1 << 16)
            if not chunk:
                raise ProgramError(self._ended())
            self.buf += chunk
            if len(self.buf) > _MAX_REPLY:
                self.kill()
                raise ProgramError("the program's reply is larger than %d bytes" % _MAX_REPLY)
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        if not isinstance(msg, dict):
            raise ProgramError("malformed reply from the program's process")
        return msg

    def request(self, op, ref, **kw):
        self.next_id += 1
        self._send(dict(kw, op=op, ref=ref, id=self.next_id))
        msg = self._recv()
        if msg.get("id") != self.next_id:
            raise ProgramError("malformed reply from the program's process")
        if "err" in msg:
            raise ProgramError(str(msg["err"]))
        return msg

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        self.kill()
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass


class Remote:
    """A non-data object of the program (function, class, instance, iterator).
    Calls and a few queries go to the program's process; comparisons do not
    (== is identity), so an object cannot claim to equal the expected value."""

    __slots__ = ("_w", "_ref", "_gen")

    def __init__(self, w, ref, gen):
        object.__setattr__(self, "_w", w)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_gen", gen)

    def _ask(self, op, **kw):
        if self._gen != _state.gen:
            raise ProgramError("object of a previous run of the program")
        return self._w.request(op, self._ref, **kw)

    def __call__(self, *args, **kwargs):
        msg = self._ask("call", args=enc(list(args)), kwargs=enc(kwargs))
        # In-place changes of list/dict/set arguments come back as data.
        new = dec(msg.get("args"), self._w, self._gen)
        if isinstance(new, list) and len(new) == len(args):
            for old, upd in zip(args, new):
                if type(old) is list and type(upd) is list:
                    old[:] = upd
                elif type(old) is dict and type(upd) is dict:
                    old.clear()
                    old.update(upd)
                elif type(old) is set and type(upd) is set:
                    old.clear()
                    old.update(upd)
        return dec(msg["ok"], self._w, self._gen)

    def __getattr__(self, name):
        return dec(self._ask("getattr", name=name)["ok"], self._w, self._gen)

    def __setattr__(self, name, value):
        self._ask("setattr", name=name, value=enc(value))

    def __iter__(self):
        return iter(dec(self._ask("list")["ok"], self._w, self._gen))

    def __len__(self):
        return dec(self._ask("len")["ok"], self._w, self._gen)

    def __bool__(self):
        return dec(self._ask("bool")["ok"], self._w, self._gen) is True

    def __getitem__(self, key):
        return dec(self._ask("getitem", key=enc(key))["ok"], self._w, self._gen)

    def __str__(self):
        return str(dec(self._ask("str")["ok"], self._w, self._gen))

    def __repr__(self):
        return str(dec(self._ask("repr")["ok"], self._w, self._gen))

    __hash__ = object.__hash__


_TYPES = (int, float, str, bool, bytes, complex, list, tuple, dict, set, frozenset)


def enc(x, depth=0):
    if depth > 200:
        raise ValueError("argument nested too deep")
    t, d = type(x), depth + 1
    if x is None or t in (bool, int, float, str):
        return x
    if t is Remote:
        if x._gen != _state.gen:
            raise ProgramError("object of a previous run of the program")
        return {"r": x._ref}
    if t is complex:
        return {"c": [x.real, x.imag]}
    if t in (bytes, bytearray):
        return {"b": bytes(x).hex()}
    if isinstance(x, tuple):
        return {"t": [enc(v, d) for v in x]}
    if isinstance(x, list):
        return {"l": [enc(v, d) for v in x]}
    if isinstance(x, frozenset):
        return {"f": [enc(v, d) for v in x]}
    if isinstance(x, set):
        return {"s": [enc(v, d) for v in x]}
    if isinstance(x, dict):
        return {"d": [[enc(k, d), enc(v, d)] for k, v in x.items()]}
    if t is type and x in _TYPES:
        return {"T": x.__name__}
    if t is decimal.Decimal:
        return {"D": str(x)}
    if t is fractions.Fraction:
        return {"F": [x.numerator, x.denominator]}
    raise TypeError("cannot pass a %s to the program" % t.__name__)


def dec(x, w, gen):
    """Data from the program's process as plain Python values (a Remote for objects)."""
    t = type(x)
    if x is None or t in (bool, int, float, str):
        return x
    if t is list:
        raise ProgramError("malformed value from the program's process")
    if t is not dict or len(x) != 1:
        raise ProgramError("malformed value from the program's process")
    (k, v), = x.items()
    if k == "r" and type(v) is int:
        return Remote(w, v, gen)
    if k == "c": return complex(float(v[0]), float(v[1]))
    if k == "b": return bytes.fromhex(v)
    if k == "t": return tuple(dec(e, w, gen) for e in v)
    if k == "l": return [dec(e, w, gen) for e in v]
    if k == "f": return frozenset(dec(e, w, gen) for e in v)
    if k == "s": return set(dec(e, w, gen) for e in v)
    if k == "d": return {dec(a, w, gen): dec(b, w, gen) for a, b in v}
    if k == "D": return decimal.Decimal(str(v))
    if k == "F": return fractions.Fraction(int(v[0]), int(v[1]))
    raise ProgramError("malformed value from the program's process")


class _State:
    worker = None
    gen = 0
    names = None
    program_error = None


_state = _State()


def start_program():
    """(Re)starts the program's process; returns None or the program's error."""
    if _state.worker is not None:
        _state.worker.close()
    _state.gen += 1
    _state.names = None
    try:
        _state.worker = Worker(_task.get("program", ""))
        hello = _state.worker.hello
    except (ProgramError, ValueError, OSError) as e:
        return "the program did not start: " + _describe(e) if not isinstance(e, ProgramError) else str(e)
    if isinstance(hello.get("program_error"), str):
        return hello["program_error"]
    if not isinstance(hello.get("globals"), dict):
        return "malformed reply from the program's process"
    try:
        names = {}
        for k, v in hello["globals"].items():
            if "module" in v:
                m = str(v["module"])
                if m.split(".")[0] in sys.stdlib_module_names:
                    names[k] = importlib.import_module(m)
            else:
                names[k] = dec(v["value"], _state.worker, _state.gen)
        _state.names = names
    except Exception as e:
        return "malformed reply from the program's process: " + _describe(e)
    return None


def run_test(code, ns, name):
    """Runs test code (trusted) in ns; None or the error."""
    if _state.worker is None or not _state.worker.alive():
        err = start_program()
        if err is not None:
            return "program failed: " + err
        try:
            refresh(ns)
        except Exception as e:
            return "setup failed: " + _describe(e)
    try:
        if isinstance(code, str):
            code = compile(code, name, "exec")
        _state.worker.deadline = time.monotonic() + _test_timeout if _test_timeout > 0 else None
        try:
            exec(code, ns)
        finally:
            _state.worker.deadline = None
        return None
    except Exception as e:
        return _describe(e)


_result = {"program_error": None, "setup_error": None, "tests": []}
_bind = []  # (namespace, extra bindings) refreshed after a restart of the program


def refresh(ns):
    """Binds the program's names in ns: MBPP tests call the program's functions by
    name; HumanEval's check() sees only the entry point (as its parameter and by
    its name, which some checks compare against), so the task's own helpers (from
    its prompt) are never replaced by the program's."""
    if _entry_param is not None:
        ns[_entry_param[1]] = ns[_entry_param[0]] = _state.names.get(_entry_param[0])
        return
    for k in _program_names:
        ns.pop(k, None)
    ns.update(_state.names)
    _program_names.clear()
    _program_names.update(_state.names)
    if _task.get("setup"):
        exec(compile(_task["setup"], "<setup>", "exec"), ns)


def _fail_all(n, why):
    _result["tests"] = [{"ok": False, "error": why} for _ in range(n)]


def _finish():
    if _state.worker is not None:
        _state.worker.close()
    data = (json.dumps(_result) + "\n").encode()
    while data:
        data = data[os.write(_RESULT_FD, data):]
    os._exit(0)


_program_names = {}
_entry_param = None
_check = _task.get("check")
_tests = _task.get("tests") or []
_result["program_error"] = start_program()
_ns = {"__name__": "__main__", "__builtins__": __builtins__}

if _check is None:
    if _result["program_error"] is not None:
        _fail_all(len(_tests), "program failed: " + _result["program_error"])
        _finish()
    try:
        refresh(_ns)
    except Exception as e:
        _result["setup_error"] = _describe(e)
    for i, t in enumerate(_tests):
        err = run_test(t, _ns, "<test %d>" % i)
        _result["tests"].append({"ok": err is None, "error": err})
    _finish()

entry = _check["entry_point"]
codes = None
param = None
try:
    mod = ast.parse(_check["test"])
    fn = [n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "check"][0]
    param = fn.args.args[0].arg
    stmts = [(s, any(isinstance(n, ast.Assert) for n in ast.walk(s))) for s in fn.body]
    stmts = [(s, is_test) for s, is_test in stmts
             if is_test or not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    codes = [(compile(ast.Module(body=[s], type_ignores=[]), "<check>", "exec"), is_test)
             for s, is_test in stmts]
    if not any(is_test for _, is_test in codes):
        raise ValueError("check() has no assert")
except Exception:
    codes = None
n_tests = sum(1 for _, t in codes if t) if codes is not None else 1
if _result["program_error"] is not None:
    _fail_all(n_tests, "program failed: " + _result["program_error"])
    _finish()
if not isinstance(_state.names.get(entry), Remote):
    _fail_all(n_tests, "the program does not define " + entry)
    _finish()
# The task's own prompt (helpers such as HumanEval/32's poly) and check() run
# here, with the program's entry point bound to the program's function.
try:
    exec(compile(_check.get("prompt", ""), "<prompt>", "exec"), _ns)
    exec(compile(_check["test"], "<test>", "exec"), _ns)
except Exception as e:
    _fail_all(n_tests, "test code failed: " + _describe(e))
    _finish()
if codes is None:
    _entry_param = (entry, "__candidate")
    refresh(_ns)
    err = run_test("check(__candidate)", _ns, "<check>")
    _result["tests"].append({"ok": err is None, "error": err})
    _finish()
_entry_param = (entry, param)
refresh(_ns)
for code, is_test in codes:
    err = run_test(code, _ns, "<check>")
    if is_test:
        _result["tests"].append({"ok": err is None, "error": err})
    elif err is not None and _result["setup_error"] is None:
        _result["setup_error"] = "check() statement failed: " + err
_finish()
)PY";
}

}  // namespace titan::rl
