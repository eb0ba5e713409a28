"""The harness: the few lines that run inside each sandboxed process, shipped as source text (`-c`).

It reads one job on stdin (one line: the parent's `ascii()` of a dict of plain values, read before any
untrusted code runs), sets the rlimits, runs the code and reports, in one of four modes:
  call    run the code in a fresh module (`__name__` is `__solution__`, not `__main__`: a self-test block
          under `if __name__ == "__main__":` does not run, as in HumanEval's and MBPP's harnesses), call
          the case's function with its arguments (decoded from the tagged format of
          `rlft.verifiers.sandbox.values`), write one JSON line with the result's encoding to a private
          copy of fd 1 (the code's own prints go to stderr), exit 0. The process never sees an expected
          value and never reports a verdict: its report is its output, and the parent compares. With a
          `probe` it reports one bit instead of the value: `bool(result)` for `assert f(x)` (the
          truthiness Python's assert uses, of any object), or `result is None/True/False`; one bit the
          code could also produce by returning True. With `echo` it also reports the arguments after the
          call (a judge's test may look at what the function did to a list it was given).
  stdin   run the code as `__main__` (programs run their main block) with the case's input on fd 0 (a file
          in the work dir, unlinked); its stdout is the output the parent compares.
  judge   run a test (no model code here) with each name in `proxies` bound to a stub that sends the
          call's arguments to the parent (a JSON line on the private fd) and reads back the value the code
          returned, in a fresh sandbox, or the builtin exception type it raised; exit 0 when the test
          raised nothing. The parent takes the exit status as the verdict (the process held no model code).
  whole   (forgeable mode) run the code, then the test, in one scope; exit 0 when neither raised. The
          parent takes the exit status as the verdict, which the code can forge (`os._exit(0)`).
`exit()` and `quit()` are defined (raise SystemExit, as `site` would make them; `-S` skips site).
Values are encoded with the built-in types' own methods (`int.__format__`, `list.__iter__`, ...), so a
subclass's overridden `__eq__`, `__repr__` or `__iter__` is never called when encoding, and an object that
is not plain data has no encoding at all. None of this is trusted by the parent: whatever the process
writes is decoded under bounds and compared there.
"""

from __future__ import annotations

import inspect
from functools import cache


@cache
def child_source() -> str:
    """The harness as a `python -c` program."""
    return inspect.getsource(_child) + "\n_child()\n"


def _child() -> None:  # pragma: no cover - runs inside the sandbox process, shipped as source text
    """Read the job, set the rlimits, run the code, report (see the module docstring)."""
    import os
    import resource
    import sys

    def read_line(fd):  # os-level: nothing past the line is buffered away from a judge's later replies
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                break
        return b"".join(chunks)

    # ascii() of plain data, evaluated with no builtins: json (and re) would cost ~90 ms per process here.
    job = eval(read_line(0).decode("ascii"), {"__builtins__": {}})  # noqa: S307
    mode = job["mode"]
    if mode == "stdin":  # the case's input: a file in the (tmpfs) work dir, unlinked once open
        fd = os.open(".rlft-stdin", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        data = job["input"].encode("utf-8", "surrogatepass")
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, 0)
        os.unlink(".rlft-stdin")
    elif mode == "judge":
        fd = os.dup(0)  # the parent's replies arrive on stdin
    else:
        fd = os.open("/dev/null", os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    out = os.dup(1)
    if mode != "stdin":
        os.dup2(2, 1)  # the code's prints go to stderr; the report goes to the private copy of fd 1
    for name, (soft, hard) in job["rlimits"].items():
        res = getattr(resource, name)
        cur = resource.getrlimit(res)[1]
        if cur != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur), min(hard, cur)
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError):
            pass
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115 - fd 0 now holds the input
    write, exit_, type_, list_, str_, len_ = os.write, os._exit, type, list, str, len
    exc_types = (BaseException,)
    import builtins

    def quitter(code=None):
        raise SystemExit(code)

    builtins.exit = builtins.quit = quitter
    if mode == "stdin":
        scope = sys.modules["__main__"].__dict__
    else:  # a fresh module, registered so that its functions pickle (multiprocessing) as __solution__.f
        module = type_(sys)("__solution__")
        sys.modules["__solution__"] = module
        scope = module.__dict__

    def describe(exc):
        try:
            text = f"{type_(exc).__name__}: {str_(exc)}" if str_(exc) else type_(exc).__name__
        except exc_types:
            text = "error"
        return text[:300]

    def run(src, name):
        exec(compile(src, name, "exec"), scope)

    if mode == "stdin" or mode == "whole":
        status = 0
        try:
            run(job["code"], "<solution>")
            if mode == "whole":
                run(job["test"], "<test>")
        except SystemExit as exc:
            status = 0 if exc.code is None or exc.code == 0 else 1
        except exc_types as exc:
            write(2, ("\n" + describe(exc) + "\n").encode("utf-8", "replace"))
            status = 1
        try:
            sys.stdout.flush()
        except exc_types:
            status = 1
        exit_(status)

    hex_of = int.__format__  # hex: no 4,300-digit limit (sys.set_int_max_str_digits) on power-of-2 bases
    def view_hex(v):  # a memoryview of bytes equals those bytes; of anything else it is not plain data
        if memoryview.__dict__["format"].__get__(v) != "B" or memoryview.__dict__["ndim"].__get__(v) != 1:
            raise TypeError("a memoryview of other than bytes")
        return memoryview.tobytes(v).hex()

    scalars = ((bool, None), (int, lambda v: hex_of(v, "x")), (float, float.__repr__), (complex, complex.__repr__),
               (bytes, bytes.hex), (bytearray, bytearray.hex), (memoryview, view_hex))
    tags = {int: "i", float: "f", complex: "c", bytes: "y", bytearray: "y", memoryview: "y"}
    containers = ((list, "l", list.__iter__), (tuple, "t", tuple.__iter__), (set, "S", set.__iter__),
                  (frozenset, "F", frozenset.__iter__), (type_({}.keys()), "S", iter),
                  (type_({}.items()), "S", iter))
    mro_of = type_.__dict__["__mro__"].__get__
    modules = sys.modules
    str_encode, str_isascii = str.encode, str.isascii
    items_of = dict.items

    def typed(v, mro):  # only when the code imported the module: no import cost otherwise
        frac = getattr(modules.get("fractions"), "Fraction", None)
        dec = getattr(modules.get("decimal"), "Decimal", None)
        if frac is not None and frac in mro:
            return ["Q", [hex_of(frac.__dict__["_numerator"].__get__(v), "x"),
                          hex_of(frac.__dict__["_denominator"].__get__(v), "x")]]
        if dec is not None and dec in mro:
            return ["D", dec.__str__(v)]
        dt = modules.get("datetime")
        if dt is not None and dt.datetime in mro:
            return ["W", dt.datetime.isoformat(v)]
        if dt is not None and dt.date in mro:
            return ["T", dt.date.isoformat(v)]
        return None

    def encode(v, depth=0):
        if depth > 100:
            raise ValueError("value nested too deep")
        if v is None:
            return ["n"]
        mro = mro_of(type_(v))
        if str in mro:
            s = str.__str__(v)
            if not str_isascii(s):
                try:
                    str_encode(s, "utf-8")
                except UnicodeEncodeError:
                    return ["u", str_encode(s, "utf-8", "surrogatepass").hex()]
            return ["s", s]
        for kind, fn in scalars:
            if kind in mro:
                return ["b", v is True] if kind is bool else [tags[kind], fn(v)]
        for kind, tag, it in containers:
            if kind in mro:
                return [tag, [encode(x, depth + 1) for x in list_(it(v))]]
        special = typed(v, mro)
        if special is not None:
            return special
        if dict in mro:
            coll = modules.get("collections")
            tag = "d"
            if coll is not None and coll.Counter in mro:
                tag = "K"
            elif coll is not None and coll.OrderedDict in mro:
                tag = "O"
            return [tag, [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in list_(items_of(v))]]
        raise TypeError(f"{type_(v).__name__} is not plain data")

    def jstr(s):  # a JSON string, ASCII only
        if str_isascii(s) and s.isprintable() and '"' not in s and "\\" not in s:
            return '"' + s + '"'
        chars = []
        for ch in s:
            o = ord(ch)
            if 32 <= o < 127 and ch != '"' and ch != "\\":
                chars.append(ch)
            elif o > 0xFFFF:  # a surrogate pair
                o -= 0x10000
                chars.append("\\u%04x\\u%04x" % (0xD800 | (o >> 10), 0xDC00 | (o & 0x3FF)))
            else:
                chars.append("\\u%04x" % o)
        return '"' + "".join(chars) + '"'

    def dumps(v):  # the report holds lists, str and bool only
        if v is True or v is False:
            return "true" if v else "false"
        if type_(v) is str_:
            return jstr(v)
        return "[" + ",".join([dumps(x) for x in v]) + "]"

    def report(obj):
        try:
            data = dumps(obj) + "\n"
        except exc_types as exc:
            data = dumps(["error", "report failed: " + describe(exc)]) + "\n"
        write(out, data.encode("ascii"))
        exit_(0)

    builders = {"l": list, "t": tuple, "S": set, "F": frozenset}

    def decode(enc):  # the parent's encoding of the case's arguments
        tag = enc[0]
        if tag == "n":
            return None
        if tag == "b":
            return enc[1]
        if tag in builders:
            return builders[tag](decode(x) for x in enc[1])
        if tag in ("d", "K", "O"):
            pairs = [(decode(k), decode(v)) for k, v in enc[1]]
            if tag == "d":
                return dict(pairs)
            import collections
            return collections.Counter(dict(pairs)) if tag == "K" else collections.OrderedDict(pairs)
        if tag in ("Q", "D", "T", "W"):
            import datetime
            import decimal
            import fractions
            if tag == "Q":
                return fractions.Fraction(int(enc[1][0], 16), int(enc[1][1], 16))
            if tag == "D":
                return decimal.Decimal(enc[1])
            return (datetime.date if tag == "T" else datetime.datetime).fromisoformat(enc[1])
        if tag == "u":
            return bytes.fromhex(enc[1]).decode("utf-8", "surrogatepass")
        return {"i": lambda x: int(x, 16), "f": float, "c": complex, "s": str, "y": bytes.fromhex}[tag](enc[1])

    if mode == "judge":
        def fail(kind, text):
            cls = getattr(builtins, kind, None)
            if not (isinstance(cls, type_) and issubclass(cls, Exception)):
                cls = RuntimeError
            return cls(text)

        def restore(orig, new):  # what the function did to a list, dict or set it was given
            if type_(orig) is list_ and type_(new) is list_:
                orig[:] = new
            elif type_(orig) in (dict, set) and type_(new) is type_(orig):
                orig.clear()
                orig.update(new)

        def proxy(name):
            def call(*args, **kwargs):
                try:
                    request = dumps(["call", name, encode(list_(args)), encode(kwargs)]) + "\n"
                except exc_types as exc:
                    raise TypeError(f"{name}() of a value that is not plain data: {describe(exc)}") from None
                write(out, request.encode("ascii"))
                reply = eval(read_line(0).decode("ascii"), {"__builtins__": {}})  # noqa: S307 - the parent's
                if reply[0] != "ok":
                    raise fail(reply[1], reply[2])
                if reply[2] is not None:
                    for a, b in zip(args, decode(reply[2])):
                        restore(a, b)
                    for k, b in decode(reply[3]).items():
                        restore(kwargs.get(k), b)
                return decode(reply[1])
            call.__name__ = call.__qualname__ = name
            return call

        for name in job["proxies"]:
            scope[name] = proxy(name)
        test = job["test"]
        del job
        try:
            run(test, "<test>")
        except exc_types as exc:
            write(2, ("\n" + describe(exc) + "\n").encode("utf-8", "replace"))
            exit_(1)
        exit_(0)

    args, kwargs, name, materialize = decode(job["args"]), decode(job["kwargs"]), job["fn"], job["materialize"]
    probe, echo = job.get("probe"), job.get("echo")
    code = job["code"]
    del job
    try:
        run(code, "<solution>")
    except exc_types as exc:
        report(["code-error", describe(exc)])
    fn = scope.get(name)
    if not callable(fn):
        report(["missing", f"the code defines no function {name}"])
    try:
        value = fn(*args, **kwargs)
    except exc_types as exc:
        report(["raised", describe(exc)])
    if probe is not None:
        try:
            bit = bool(value) if probe == "truth" else value is decode(probe)
        except exc_types as exc:
            report(["raised", describe(exc)])
        report(["ok", ["b", bit is True]])
    try:
        enc = encode(value)
    except exc_types as exc:
        if not materialize:
            report(["error", "the result is not plain data: " + describe(exc)])
        try:  # `list(f(x))`, `sorted(f(x))`, ...: the test iterates the result, so may the harness
            items = []
            for item in value:
                items.append(item)
                if len_(items) > 200_000:
                    raise ValueError("more than 200,000 items")
            enc = encode(items)
        except exc_types as exc2:
            report(["error", "the result is not plain data: " + describe(exc2)])
    if echo:
        try:
            after = [encode(list_(args)), encode(kwargs)]
        except exc_types:
            after = [["n"], ["n"]]
        report(["echo", [enc, *after]])
    report(["ok", enc])
