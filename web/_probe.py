"""The part of validation that runs the plugin's code, inside the sandbox.

Run as a script (``python -I _probe.py TARGET DIST WHEEL [--gpu]``) with the wheel installed
in TARGET: it finds the distribution's ``opmarket`` entry points, loads them into a fresh
registry, snapshots the op-set, compares it with the shipped manifest, and runs conformance.
It prints one JSON line prefixed with ``RESULT`` last; everything else is the log. It must
not import ``opmarket.web`` (the server's dependencies are not the plugin's business).
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

MARK = "RESULT "


def _step(name: str, status: str, *lines: str) -> dict[str, Any]:
    return {"name": name, "status": status, "log": [line for line in lines if line]}


def _signature(op: Any) -> str:
    ins = ", ".join(a.spec for a in op.inputs)
    outs = ", ".join(a.spec for a in op.outputs)
    attrs = "; ".join(a.spec for a in op.attrs)
    return f"{op.name}({ins}) -> ({outs})" + (f" [{attrs}]" if attrs else "")


def probe(target: str, dist_name: str, wheel: str, gpu: bool) -> dict[str, Any]:
    import importlib.metadata

    from packaging.utils import canonicalize_name

    sys.path.insert(0, target)
    steps: list[dict[str, Any]] = []
    out: dict[str, Any] = {"steps": steps}
    dists = [d for d in importlib.metadata.distributions(path=[target])
             if canonicalize_name(d.metadata["Name"] or "") == canonicalize_name(dist_name)]
    if not dists:
        steps.append(_step("entry point", "failed", f"{dist_name} is not installed in {target}"))
        return out
    dist = dists[0]
    eps = [ep for ep in dist.entry_points if ep.group == "opmarket"]
    if not eps:
        steps.append(_step("entry point", "failed",
                           "the wheel declares no entry point in group 'opmarket'"))
        return out
    steps.append(_step("entry point", "passed", *(f"{ep.name} = {ep.value}" for ep in eps)))

    from opmarket import registry

    reg = registry.new_registry()
    # This distribution's entry points only, each isolated, whatever OPMARKET_PLUGINS says.
    infos = registry.load_plugins_from([target], registry=reg, distribution=dist_name)
    failed = [i for i in infos if i.status != "loaded"]
    if failed:
        steps.append(_step("load", "failed", *(f"{i.name}: {i.error}" for i in failed)))
        return out
    steps.append(_step("load", "passed",
                       *(f"{i.name}: {len(i.ops)} op(s): {', '.join(i.ops)}" for i in infos)))
    ops: list[Any] = []
    kernels: list[Any] = []
    for info in infos:
        snap = reg.snapshot(source=info.source)
        ops.extend(snap.ops)
        kernels.extend(snap.kernels)
    from opmarket.sdk import OpSet, opset_to_json

    opset = OpSet.of(sorted(ops, key=lambda o: o.name), kernels,
                     name=str(canonicalize_name(dist_name)), version=dist.version)
    if not ops:
        steps.append(_step("snapshot", "failed", "the plugin registers no ops"))
        return out
    out["opset"] = opset_to_json(opset)
    out["ops"] = [{"name": o.name, "signature": _signature(o), "summary": o.summary}
                  for o in opset.ops]
    steps.append(_step("snapshot", "passed",
                       f"{len(opset.ops)} op(s), {len(opset.kernels)} kernel(s)"))

    manifest = None
    try:
        from opmarket.compat import opset_from_wheel

        manifest = opset_from_wheel(wheel)
    except Exception as exc:
        steps.append(_step("manifest", "failed", f"opmarket.opset.json: {exc}"))
    else:
        want = {o.name: o for o in manifest.ops}
        have = {o.name: o for o in opset.ops}
        problems = [f"{n}: in the manifest, not registered" for n in sorted(set(want) - set(have))]
        problems += [f"{n}: registered, not in the manifest" for n in sorted(set(have) - set(want))]
        problems += [f"{n}: the manifest's definition differs from the registered one"
                     for n in sorted(set(want) & set(have)) if want[n] != have[n]]
        steps.append(_step("manifest", "failed" if problems else "passed", *problems,
                           "" if problems else "opmarket.opset.json matches what registers"))

    check = getattr(registry, "check_conformance", None)
    out["kernels"] = []
    if check is None:
        steps.append(_step("conformance", "not available",
                           "opmarket.registry has no check_conformance yet"))
        return out
    names = [o.name for o in opset.ops]
    devices = ["CPU", "GPU"] if gpu else ["CPU"]
    report = check(names, registry=reg, devices=devices)
    rows = [{"op": r.op, "device": r.device, "dtypes": ", ".join(f"{k}={v}" for k, v in r.types),
             "status": r.status, "message": r.message} for r in report.results]
    if not gpu:
        # Non-CPU kernels: those registered here, and those the manifest declares that only
        # register where their device is (a CUDA kernel on a machine without a GPU).
        seen: set[tuple[str, str, str]] = set()
        declared = [(name, k.device, "") for name in names for k in reg.kernels(name)]
        here = {(name, device) for name, device, _ in declared}
        if manifest is not None:
            declared += [
                (k.op, k.device, ", ".join(f"{a}={'|'.join(t.spec_name for t in ts)}"
                                           for a, ts in k.constraints))
                for k in manifest.kernels if k.op in names and (k.op, k.device) not in here
            ]
        for name, device, dtypes in declared:
            if device != "CPU" and (name, device, dtypes) not in seen:
                seen.add((name, device, dtypes))
                rows.append({"op": name, "device": device, "dtypes": dtypes,
                             "status": f"{device.lower()}: not run",
                             "message": "no worker with that device validated it"})
    out["kernels"] = rows
    failures = [str(r) for r in report.failures]
    lines = [str(r) for r in report.results] + [
        f"{r['op']} {r['device']}: {r['status']}" for r in rows if r["status"].endswith("not run")]
    steps.append(_step("conformance", "failed" if failures else "passed", *lines))
    return out


def main(argv: list[str]) -> int:
    target, dist_name, wheel = argv[:3]
    try:
        result = probe(target, dist_name, wheel, "--gpu" in argv)
    except BaseException:
        result = {"steps": [_step("load", "failed", traceback.format_exc())]}
    sys.stdout.flush()
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
