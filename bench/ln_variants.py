"""Variants for the LayerNorm benches: named sets of environment
assignments, so that one run can A/B plans (JITOP_LN_PLAN, JITOP_LN_THREADS,
or any other variable a context reads when it first uses LayerNorm).

    'base=;cl4=JITOP_LN_PLAN=fwd_cluster_tpr=256,fwd_fit=1;pow2=JITOP_LN_THREADS=pow2'

Variants are separated by ';'; each is NAME=ASSIGNMENTS, the assignments
KEY=VALUE separated by spaces (a value runs to the next space, and may hold
'=' and ','); an empty list leaves the environment as the run found it.
Standard library only."""
import os
import re

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse(spec):
    """[(name, {KEY: VALUE})] in order; ValueError naming what is wrong."""
    out, seen = [], set()
    for part in (p.strip() for p in spec.split(";")):
        if not part:
            continue
        if "=" not in part:
            raise ValueError(f"variant '{part}': expected NAME=[KEY=VALUE ...]")
        name, rest = part.split("=", 1)
        name = name.strip()
        if not _NAME.match(name):
            raise ValueError(f"variant name '{name}': letters, digits and _.+- only")
        if name in seen:
            raise ValueError(f"variant '{name}' given twice")
        seen.add(name)
        env = {}
        for a in rest.split():
            if "=" not in a:
                raise ValueError(f"variant '{name}': '{a}' is not KEY=VALUE")
            k, v = a.split("=", 1)
            if not _KEY.match(k):
                raise ValueError(f"variant '{name}': '{k}' is not an environment variable name")
            env[k] = v
        out.append((name, env))
    if not out:
        raise ValueError("no variant given")
    return out


def from_rules(rules):
    """--rules warps,pow2 as variants: one JITOP_LN_THREADS value each."""
    return [(r, {"JITOP_LN_THREADS": r}) for r in rules]


def env_of(variants, name, base=None):
    """The environment of variant name: base (os.environ) with every key any
    variant sets put back to base's value, then this variant's over it, so
    that one variant's settings never leak into the next."""
    base = dict(os.environ if base is None else base)
    touched = {k for _, e in variants for k in e}
    env = {k: v for k, v in base.items()}
    mine = dict(variants)[name]
    for k in touched:
        if k in mine:
            env[k] = mine[k]
    return env


def describe(variants):
    return "; ".join(f"{n}: " + (" ".join(f"{k}={v}" for k, v in e.items()) or "(as run)")
                     for n, e in variants)
