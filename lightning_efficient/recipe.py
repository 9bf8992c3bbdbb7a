"""recipe (STUB)."""


def recipe(**overrides):
    return {}
