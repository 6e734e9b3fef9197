"""One kernel name, whatever the tracer: the normaliser both trace loaders call (`workbench.traces.events`).

    from workbench.traces.names import kernel_name, base_name, template_args
    kernel_name("_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x32_8x5_nn_align1EEvNT_6ParamsE")
    # 'cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>'
    base_name(_)       # 'Kernel2'  (what Nsight Systems calls the shortName)
    template_args(_)   # 'cutlass_80_simt_sgemm_128x32_8x5_nn_align1'

Why: the two tracers name one kernel three ways. torch.profiler (kineto) stores the name demangled by libstdc++'s
`__cxa_demangle`, except names over 1024 characters, which it leaves mangled (CUTLASS 3 grouped GEMMs:
`_ZN7cutlass13device_kernel...`). The Nsight Systems export holds the mangled name (`mangledName`), its own
demangling (`demangledName`: `(int)4`, `[lambda() (instance 1)]`, `<unnamed>`, parameters as `T2, T3`) and a short
name (`shortName`: `vectorized_elementwise_kernel`, `Kernel2`), which drops the template arguments that say what an
elementwise kernel does (a dtype cast, a fill, a multiply) and which GEMM a CUTLASS launcher runs.

The one form: the mangled name (nsys: `mangledName`; torch: the name itself when kineto left it mangled) demangled
with the same `__cxa_demangle` kineto uses (through ctypes: no new dependency), then the return type and the
parameter list dropped (Nsight's demangler writes them as `T2, T3`, so they cannot agree), with Nsight's demangling
rewritten into the libstdc++ spelling where only that form exists (an export without `mangledName`). A kernel
therefore has the same name, and so the same class (`workbench.traces.classify`), from either tool.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re

MEMSET = "Memset"
"""The name of every memset row (torch: `Memset (Device)`, a `gpu_memset` event; nsys: CUPTI_ACTIVITY_KIND_MEMSET)."""

_OPEN, _CLOSE = "<([{", ">)]}"


@functools.lru_cache(maxsize=1)
def _cxa_demangle():
    """libstdc++'s `__cxa_demangle` and libc's `free`, or None where libstdc++ cannot be loaded."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        fn = lib.__cxa_demangle
        libc = ctypes.CDLL(None)
    except (OSError, AttributeError):  # pragma: no cover - depends on the platform
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    return fn, libc.free


@functools.lru_cache(maxsize=None)
def demangle(symbol: str) -> str:
    """An Itanium-mangled C++ symbol (`_Z...`) demangled as kineto does (`__cxa_demangle`); any other string, or
    one the demangler rejects, unchanged."""
    if not symbol.startswith("_Z"):
        return symbol
    api = _cxa_demangle()
    if api is None:  # pragma: no cover - depends on the platform
        return symbol
    fn, free = api
    status = ctypes.c_int(0)
    ptr = fn(symbol.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return symbol
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        free(ptr)


# Nsight's demangler -> the libstdc++ spelling (harmless on libstdc++ output)
_NSYS_REWRITES = (
    (re.compile(r"<unnamed>"), "(anonymous namespace)"),
    (re.compile(r"\[lambda\(([^()\]]*)\) \(instance (\d+)\)\]"), r"{lambda(\1)#\2}"),
    (re.compile(r"\(bool\)0"), "false"),
    (re.compile(r"\(bool\)1"), "true"),
    (re.compile(r"\(unsigned long long\)(-?\d+)"), r"\1ull"),
    (re.compile(r"\(unsigned long\)(-?\d+)"), r"\1ul"),
    (re.compile(r"\(unsigned int\)(-?\d+)"), r"\1u"),
    (re.compile(r"\(long long\)(-?\d+)"), r"\1ll"),
    (re.compile(r"\(long\)(-?\d+)"), r"\1l"),
    (re.compile(r"\((?:int|short|unsigned short|signed char|unsigned char)\)(-?\d+)"), r"\1"),
    (re.compile(r"\bconst ([A-Za-z_][\w:]*(?:<[^<>]*>)?) ?([*&])"), r"\1 const\2"),
    (re.compile(r"operator \(\)"), "operator()"),
    (re.compile(r"(\w|>) ([*&])"), r"\1\2"),
    (re.compile(r"\s+"), " "),
    (re.compile(r"(?<=>) +(?=>)"), ""),
    (re.compile(r"(?<=[<,] )void (?=[\w:])|(?<=<)void (?=[\w:])"), ""),
)


def _collapse_scopes(s: str) -> str:
    """`f<T>(at::TensorIteratorBase&, T1 const&)::{lambda(int)#1}` -> `f<T>(...)::{lambda(int)#1}`: the parameter
    list of a function that encloses a local entity (a lambda in a template argument). Nsight writes it with
    template parameters (`T1 const&`), libstdc++ with the types, so only its elision agrees."""
    stack, spans = [], []
    for i, c in enumerate(s):
        if c == "(":
            stack.append(i)
        elif c == ")" and stack:
            o = stack.pop()
            if (o > 0 and (s[o - 1].isalnum() or s[o - 1] in "_>") and s[o + 1:i] not in ("", "...")
                    and s.startswith(("::", " const::"), i + 1)):
                spans.append((o, i))
    if not spans:
        return s
    out, pos = [], 0
    for o, c in sorted(spans):
        if o < pos:  # inside a span already collapsed
            continue
        out.append(s[pos:o + 1] + "...")
        pos = c
    out.append(s[pos:])
    return "".join(out)


def _split_tail_group(s: str, open_ch: str, close_ch: str) -> tuple[str, str] | None:
    """(head, inner) when `s` ends with a bracket group `open_ch ... close_ch` balanced over all bracket kinds
    (`(anonymous namespace)`, lambdas and template arguments nest inside), else None."""
    if not s.endswith(close_ch):
        return None
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        c = s[i]
        if c in _CLOSE:
            depth += 1
        elif c in _OPEN:
            depth -= 1
            if depth == 0:
                return (s[:i], s[i + 1:-1]) if c == open_ch else None
    return None


def _drop_signature(name: str) -> str:
    """Drop a leading `void ` and the trailing parameter list (with any trailing ` const`)."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    if s.endswith(" const"):
        s = s[:-6]
    split = _split_tail_group(s, "(", ")")
    if split is not None and split[0] and not split[0].endswith(("::", " ")):  # `(anonymous namespace)` alone stays
        s = split[0]
    return s


@functools.lru_cache(maxsize=None)
def kernel_name(raw) -> str:
    """The one name of a kernel (see the module docstring); idempotent, so saved events may hold either form."""
    if not isinstance(raw, str) or not raw:
        return ""
    if raw.startswith("Memset"):
        return MEMSET
    s = demangle(raw.strip())
    for pat, rep in _NSYS_REWRITES:
        s = pat.sub(rep, s)
    return _collapse_scopes(_drop_signature(s))


def _mangled_parts(sym: str) -> tuple[str, str]:
    """(base, rest) of a mangled name the demangler rejected (kineto keeps those, e.g. CUTLASS 3 grouped GEMMs):
    `_ZN7cutlass13device_kernelI...` -> ("device_kernel", "I..."), read off its length-prefixed source names."""
    i = 3 if sym.startswith("_ZN") else 2
    if sym.startswith("St", i):
        i += 2
    base = ""
    while i < len(sym) and sym[i].isdigit():
        j = i
        while j < len(sym) and sym[j].isdigit():
            j += 1
        n = int(sym[i:j])
        base, i = sym[j:j + n], j + n
    return (base, sym[i:]) if base else (sym, "")


@functools.lru_cache(maxsize=None)
def _parts(name: str) -> tuple[str, str]:
    s = kernel_name(name)
    if s.startswith("_Z"):
        return _mangled_parts(s)
    split = _split_tail_group(s, "<", ">")
    qualified, targs = split if split is not None else (s, "")
    depth, cut = 0, 0
    for i, c in enumerate(qualified):  # the last `::` outside every bracket
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0 and qualified.startswith("::", i):
            cut = i + 2
    return qualified[cut:], targs


def base_name(name) -> str:
    """The kernel function's own name, without namespace, template arguments or parameters: what Nsight Systems
    stores as `shortName` (`vectorized_elementwise_kernel`, `Kernel2`, `nvjet_sm90_tst_...`)."""
    return _parts(name if isinstance(name, str) else "")[0]


def template_args(name) -> str:
    """The text of the kernel function's template arguments ("" for a plain name such as a cuBLAS or Triton one)."""
    return _parts(name if isinstance(name, str) else "")[1]
