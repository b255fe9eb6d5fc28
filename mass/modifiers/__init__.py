"""Servable data modifiers: what is *applied* to a row, apart from how it is fitted.

One module per kind (the kind names are stored in modifier.pt and export.json and never
change): ``mass`` (:mod:`.mass`, MaSS's G), ``affine`` (:mod:`.affine`, LEACE / INLP),
``quadratic_erasure`` (:mod:`.quadratic`), ``gaussian_noise`` (:mod:`.gaussian_noise`),
``genfilter`` (:mod:`.genfilter`), ``sliced_repair`` (:mod:`.sliced_repair`, OT total
repair), ``cells`` (:mod:`.cells`, a row released as its cell's vector: the one apply path of
OT repair's cells), ``codebook`` (:mod:`.codebook`, nearest of fixed centres: older k-means
cells) and ``chain`` (:mod:`.chain`). :mod:`.base` holds n() of
eq. 1, the MLP builder and the kind registry; :mod:`.store` saves and loads RUN_DIR/modifier.pt.

Importing this package registers every kind. It imports nothing from training
(:mod:`mass.methods`, :mod:`mass.trainer`, :mod:`mass.losses`, :mod:`mass.branches`): the
methods import modifiers, never the reverse, so the served model loads only this.
"""

from mass.modifiers.affine import AffineModifier, AffineSpec
from mass.modifiers.base import (
    MODIFIER_KINDS,
    l2_normalize,
    mlp,
    modify,
    register_modifier,
)
from mass.modifiers.cells import CellsModifier, CellsSpec
from mass.modifiers.chain import ChainModifier, ChainSpec
from mass.modifiers.codebook import CodebookModifier, CodebookSpec
from mass.modifiers.gaussian_noise import GaussianNoiseModifier, NoiseSpec
from mass.modifiers.genfilter import GenFilterModifier, GenFilterSpec
from mass.modifiers.mass import DataModifier, ModifierSpec
from mass.modifiers.quadratic import QuadraticErasureModifier, QuadraticSpec
from mass.modifiers.sliced_repair import SlicedRepairModifier, SlicedRepairSpec
from mass.modifiers.store import load_modifier, modifier_meta, save_modifier

__all__ = [
    "MODIFIER_KINDS",
    "AffineModifier",
    "AffineSpec",
    "CellsModifier",
    "CellsSpec",
    "ChainModifier",
    "ChainSpec",
    "CodebookModifier",
    "CodebookSpec",
    "DataModifier",
    "GaussianNoiseModifier",
    "GenFilterModifier",
    "GenFilterSpec",
    "ModifierSpec",
    "NoiseSpec",
    "QuadraticErasureModifier",
    "QuadraticSpec",
    "SlicedRepairModifier",
    "SlicedRepairSpec",
    "l2_normalize",
    "load_modifier",
    "mlp",
    "modifier_meta",
    "modify",
    "register_modifier",
    "save_modifier",
]
