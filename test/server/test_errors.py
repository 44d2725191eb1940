"""The supervisor's error types and the exit codes the command returns for them (listed in
config/server.yaml)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cosmos_reasoner_ros.server import errors

# As documented for `cosmos-reasoner-server` (config/server.yaml): written out here, not read from the module.
DOCUMENTED = {
    "SupervisorError": 2,
    "ConfigError": 2,
    "ExecutableNotFound": 3,
    "PortInUse": 4,
    "ContainerInUse": 4,
    "ModelNotFound": 5,
    "NotReady": 6,
    "GaveUp": 7,
    "UnknownVersion": 8,
    "ServerUsageError": 9,
    "ServerStartFailed": 10,
}


def test_each_error_type_carries_its_documented_exit_code() -> None:
    for name, code in DOCUMENTED.items():
        cls = getattr(errors, name)
        assert issubclass(cls, errors.SupervisorError)
        assert cls.exit_code == code, name
        assert cls("why").exit_code == code, name
    types = {n: v for n, v in vars(errors).items() if isinstance(v, type)}
    named = {n for n, v in types.items() if issubclass(v, errors.SupervisorError)}
    assert named == set(DOCUMENTED)


@given(st.integers(min_value=0, max_value=254))
def test_a_subclass_names_its_code_or_inherits_its_parents(code: int) -> None:
    class Parent(errors.SupervisorError, exit_code=code):
        pass

    class Named(Parent, exit_code=code + 1):
        pass

    class Inherits(Parent):
        pass

    assert (Parent.exit_code, Named.exit_code, Inherits.exit_code) == (code, code + 1, code)
    assert errors.SupervisorError.exit_code == errors.EXIT_CONFIG  # the base is left as it was
