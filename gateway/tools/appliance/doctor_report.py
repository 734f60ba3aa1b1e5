"""What ``tiergate doctor`` reports: a :class:`Finding` per thing checked (ok, warn or fail, what
was seen and the fix), shown as text for a person or as JSON for a script."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    status: Status
    detail: str
    fix: str = ""


def render(findings: list[Finding], root: Path) -> str:
    lines = [f"tiergate doctor ({root})"]
    for f in findings:
        lines.append(f"  {f.status.upper():5} {f.check:12} {f.detail}")
        if f.fix:
            lines.append(f"  {'':5} {'':12} fix: {f.fix}")
    failed = sum(f.status == "fail" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    lines.append("healthy" if not failed else f"broken: {failed} problem(s) to fix")
    if warned:
        lines[-1] += f", {warned} warning(s)"
    return "\n".join(lines)


def as_json(findings: list[Finding]) -> str:
    return json.dumps([asdict(f) for f in findings], indent=2)
