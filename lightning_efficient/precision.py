"""recommended_precision (STUB)."""


def recommended_precision(accelerator="auto"):
    return "32-true"


def explain_precision(accelerator="auto"):
    return "stub"
