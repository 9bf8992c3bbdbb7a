"""One line of a checklist (:class:`Check`): the record shared by EfficiencyReport's practices
(:mod:`~lightning_efficient.functional.checklist`), tune()'s reading of them
(:mod:`~lightning_efficient.functional.tune_advice`) and the doctor's environment checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["Check"]


@dataclass
class Check:
    """One line of a checklist (the report's practices, the doctor's environment checks).

    Attributes:
        practice: what is checked, e.g. ``"mixed precision"`` or ``"torch"``.
        ok: True (done), False (not done: ``advice`` says how), or None (does not apply / information only).
        detail: what was observed.
        advice: the concrete fix.
    """

    practice: str
    ok: Optional[bool]
    detail: str
    advice: str = ""

    def line(self, *, info_mark: str = "[-]", advice_unless_ok: bool = False) -> str:
        """``"[x] practice: detail"``; the advice follows after ``->`` where ``ok`` is False (and, with
        ``advice_unless_ok``, also where it is None), on its own line in the latter style."""
        mark = {True: "[x]", False: "[ ]", None: info_mark}[self.ok]
        text = f"{mark} {self.practice}: {self.detail}"
        if not self.advice:
            return text
        if advice_unless_ok:
            return text if self.ok is True else f"{text}\n      -> {self.advice}"
        return f"{text} -> {self.advice}" if self.ok is False else text
