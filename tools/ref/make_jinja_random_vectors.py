#!/usr/bin/env python3
"""Random Jinja differential vectors: a seeded grammar-based generator of small templates in the
style of chat templates, rendered by jinja2 the way transformers renders a chat template; writes
tests/fixtures/chat_templates/random_vectors.json for tests/unit/jinja_random_test.cc.

Run with a venv that has jinja2 (transformers optional):
    /work/peers/vllm-venv/bin/python tools/ref/make_jinja_random_vectors.py [--seed S] [--count N]

The templates and contexts come from jinja_random_templates.py (beside this script).

With transformers installed, the environment is transformers' own (`_compile_jinja_template`, as
tools/ref/make_chat_vectors.py uses). Without it, the same environment is built by hand from
transformers' chat_template_utils: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]), the default Undefined (not
StrictUndefined), a `tojson` filter that is json.dumps(x, ensure_ascii=False, indent=None,
separators=None, sort_keys=False), and globals raise_exception (a bare TemplateError) and
strftime_now (datetime.now().strftime, pinned to FIXED_NOW here as in make_chat_vectors.py).

Every vector is a template, the index of one of the shared contexts, and either jinja2's output
("expected") or the exception it raised ("error": "Type: message"). A vector naming a filter loom
lacks carries "loom_error" (the words loom's error must contain) where jinja2 without that filter
fails on its name; jinja2's own result is kept for reference. Outputs that print an object address ("at 0x...", e.g. a generator or a bound method)
differ between runs of jinja2 itself and are dropped, and so are vectors where the int filter made
an integer beyond 64 bits (a documented limit of loom).
"""
import argparse
import datetime as dt
import json
import random
import re
import sys
import warnings
from pathlib import Path

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jinja_random_templates import UNSUPPORTED_FILTERS, Gen, rand_context  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "chat_templates" / "random_vectors.json"
FIXED_NOW = dt.datetime(2024, 7, 26, 13, 45, 0)
DEFAULT_SEED = 20240726
DEFAULT_COUNT = 4000
N_CONTEXTS = 48


def make_environment():
    """Returns (environment, how it was made)."""
    try:
        from transformers.utils import chat_template_utils as ctu  # noqa: PLC0415

        class _FixedDatetime(dt.datetime):
            @classmethod
            def now(cls, tz=None):
                return FIXED_NOW

        ctu.datetime = _FixedDatetime
        import transformers  # noqa: PLC0415
        env = ctu._compile_jinja_template("{{ 1 }}").environment
        return env, f"transformers {transformers.__version__} _compile_jinja_template"
    except ImportError:
        pass

    class AssistantTracker(Extension):  # transformers' {% generation %}: renders its body as is
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):  # noqa: A002 - transformers' parameter name
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env, "by hand, as transformers' _compile_jinja_template (transformers not installed)"


# ---------------------------------------------------------------------------------------------
# Contexts

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# Set when the int filter made an integer outside 64 bits: loom's integers are 64-bit and
# overflow is an error (docs/ARCHITECTURE.md: "Integers are 64-bit (overflow is an error)"), so
# such vectors are dropped.
BIG_INT = []


def watch_int_filter(env):
    do_int = env.filters["int"]

    def int_filter(*args, **kwargs):
        r = do_int(*args, **kwargs)
        if not -2**63 <= r < 2**63:
            BIG_INT.append(r)
        return r

    env.filters["int"] = int_filter


def without_unsupported(env):
    """`env` as loom sees it: the filters loom does not have (UNSUPPORTED_FILTERS) removed, so
    that naming one fails as jinja2 fails on an unknown name — at compile time, or, in an if or a
    conditional expression, only when it runs (loom does the same: ValidateNames)."""
    rv = env.overlay()
    rv.filters = {k: v for k, v in env.filters.items() if k not in UNSUPPORTED_FILTERS}
    return rv


def names_outside_soft_frames(env, text, names):
    """Whether a filter or test named in `names` appears outside jinja2's soft frames (an if's
    condition and bodies, an inline if), which open again at a for, block or macro."""
    inner = (nodes.For, nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.AssignBlock,
             nodes.With, nodes.Scope)

    def walk(node, soft):
        if isinstance(node, (nodes.Filter, nodes.Test)) and node.name in names and not soft:
            return True
        if isinstance(node, nodes.For):  # the iterable is in the enclosing frame
            return walk(node.iter, soft) or any(walk(c, False) for c in (
                node.target, node.test, *node.body, *node.else_) if c is not None)
        if isinstance(node, nodes.If):
            soft = True
        elif isinstance(node, nodes.CondExpr):
            soft = True
        elif isinstance(node, inner):
            soft = False
        return any(walk(c, soft) for c in node.iter_child_nodes())

    return walk(env.parse(text), False)


def unknown_names(env, text):
    """The first filter or test `text` names that loom does not have (UNSUPPORTED_FILTERS) or
    that jinja2 does not have either (a dotted name, say)."""
    try:
        tree = env.parse(text)
    except jinja2.TemplateSyntaxError:
        return None
    for node in tree.find_all((nodes.Filter, nodes.Test)):
        if isinstance(node, nodes.Filter) and (node.name not in env.filters or
                                               node.name in UNSUPPORTED_FILTERS):
            return f"no filter named '{node.name}'"
        if isinstance(node, nodes.Test) and node.name not in env.tests:
            return f"no test named '{node.name}'"
    return None


def render(env, text, ctx):
    BIG_INT.clear()
    try:
        out = env.from_string(text).render(**ctx)
        return {"expected": out}
    except Exception as e:  # noqa: BLE001 - record whatever jinja2 raises
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    # Compiling a random template warns ('int' object is not subscriptable, invalid escape).
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    env, how = make_environment()
    watch_int_filter(env)
    loom_env = without_unsupported(env)
    rng = random.Random(args.seed)
    contexts = [rand_context(rng) for _ in range(N_CONTEXTS)]
    gen = Gen(rng)
    vectors, seen = [], set()
    stats = {"rendered": 0, "raised": 0, "unsupported": 0, "dropped_address": 0,
             "dropped_big_int": 0, "dropped_unsupported_differs": 0, "dropped_folded": 0}
    while len(vectors) < args.count:
        text = gen.template()
        if text in seen or len(text) > 600:
            continue
        seen.add(text)
        ci = rng.randrange(N_CONTEXTS)
        r = render(env, text, contexts[ci])
        if ADDRESS.search(r.get("expected", "") + r.get("error", "")):
            stats["dropped_address"] += 1
            continue
        if BIG_INT:
            stats["dropped_big_int"] += 1
            continue
        v = {"template": text, "context": ci}
        v.update(r)
        unknown = unknown_names(env, text)
        if unknown:
            # Rendered without the filters loom lacks: where that fails on the name, loom's error
            # is expected (also where jinja2 with the filter failed later, running it); where the
            # name is never reached (an if not taken), jinja2's output or error.
            r2 = render(loom_env, text, contexts[ci])
            e2 = r2.get("error", "")
            named = re.search(r"No (filter|test) named '([^']*)'", e2)
            if named:  # the name it failed on (not always the first one the text names)
                v["loom_error"] = f"no {named.group(1)} named '{named.group(2)}'"
                stats["unsupported"] += 1
            elif r2 != r:
                stats["dropped_unsupported_differs"] += 1
                continue
            elif names_outside_soft_frames(env, text, UNSUPPORTED_FILTERS):
                # jinja2's optimizer folded the name away before checking it (`1 or x | nope`):
                # loom checks every name outside an if (docs/ARCHITECTURE.md, ValidateNames).
                stats["dropped_folded"] += 1
                continue
            else:
                stats["raised" if "error" in r else "rendered"] += 1
        elif "error" in r:
            stats["raised"] += 1
        else:
            stats["rendered"] += 1
        vectors.append(v)
    doc = {"generator": "tools/ref/make_jinja_random_vectors.py", "seed": args.seed,
           "count": args.count, "jinja2": jinja2.__version__, "environment": how,
           "fixed_now": FIXED_NOW.isoformat(), "contexts": contexts}
    # One vector a line: small diffs when the generator changes, and a readable file.
    lines = [json.dumps(doc, ensure_ascii=False)[:-1] + ', "vectors": [']
    lines += [json.dumps(v, ensure_ascii=False) + ("," if i + 1 < len(vectors) else "")
              for i, v in enumerate(vectors)]
    lines.append("]}")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(vectors)} vectors, {args.out.stat().st_size} bytes: {stats}", file=sys.stderr)


if __name__ == "__main__":
    main()
