"""Every mutant of the mutation matrix (tests/mutations/matrix.py) names an attribute that exists,
checked in the quick suite: a module split or a renamed constant would otherwise leave a mutant
that patches nothing, and only the long ``nox -s mutations`` run would say so (as a survivor)."""

from __future__ import annotations

import pytest
from tests.mutations.matrix import MUTANTS, Mutant


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_mutant_patches_an_attribute_that_exists(mutant: Mutant) -> None:
    target, attribute, _ = mutant.patch
    assert hasattr(target, attribute), f"{mutant.name}: {target!r} has no {attribute!r}"
