"""The module catalog: one entry per module of Table 2 (001_76ce3a8a4b6079c3.txt, section
4.2), in the table's order, and the single source of every list of modules.

The report's order and sections, the checker's dispatch, the ``liptable`` command's
choices, the benchmark and the tests' parametrization all read :data:`CATALOG`. An entry
is plain data (names, not imports), so reading the catalog imports neither SymPy nor the
kernels. A module's whole story is found by its ``family``: the same file name in each
subpackage of ``derive`` (``definitions``, ``check``, ``reference``, ``codegen``,
``envelope``, ``report``), in ``proofs`` and in ``tests/<concern>/``.

Adding a module means adding one entry here and its family files.

>>> entry("layernorm").family, entry("layernorm").kernel
('norms', 'kernels.layernorm')
>>> [m.key for m in CATALOG if m.family == "attention"]
['dp_attention', 'l2_attention', 'scs_attention']
"""

from __future__ import annotations

from dataclasses import dataclass

#: The families, in the order of their first module in Table 2, then the topics' families.
FAMILIES: tuple[str, ...] = (
    "rows",
    "activations",
    "attention",
    "norms",
    "batchnorm",
    "theory",
    "initialization",
    "descent",
    "updates",
)


@dataclass(frozen=True)
class Module:
    """One module of Table 2.

    ``key``: the kernel module's name (``kernels.<key>``) and the report's section key.
    ``family``: the file name of its definition, checker, reference, generated code,
    envelope and report section. ``claim_keys``: the ``Claim.key`` values of its claims
    (``derive.claims``). ``envelopes``: the ``liptable envelope`` module names it answers
    (``()``: none). ``strict``: its strict half-precision thresholds are predicted
    (``derive.envelope.strict``). ``variants``: the keyword values its kernels take
    (GeLU's ``approximate``). ``bench``: the shape family ``liptable bench`` times it at.
    ``extra_sections``: report sections that follow its own (with claims keyed alike).
    """

    key: str
    family: str
    title: str
    source: str
    claim_keys: tuple[str, ...]
    envelopes: tuple[str, ...] = ()
    strict: bool = False
    variants: tuple[str, ...] = ()
    bench: str = "rows"
    extra_sections: tuple[str, ...] = ()

    @property
    def sections(self) -> tuple[str, ...]:
        """Its report sections: its own, then any that follow it (CenterNorm is followed by
        the rankings of the normalizations, Eq. 51-52)."""
        return (self.key, *self.extra_sections)

    @property
    def kernel(self) -> str:
        """The kernel module, ``kernels.<key>``."""
        return f"kernels.{self.key}"

    @property
    def definition(self) -> str:
        """The module holding its SymPy definition."""
        return f"derive.definitions.{self.family}"

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"{self.key}: family {self.family!r} is not one of {FAMILIES}")


_TABLE2 = "001_76ce3a8a4b6079c3.txt, Table 2, row "

#: Every module of Table 2, in the table's order (the report's order).
CATALOG: tuple[Module, ...] = (
    Module(
        "linear", "rows", "Linear", _TABLE2 + "Linear", ("linear",), ("linear",), bench="linear"
    ),
    Module(
        "conv2d",
        "rows",
        "Convolution",
        _TABLE2 + "Convolution",
        ("conv2d",),
        ("conv2d",),
        bench="conv2d",
    ),
    Module(
        "sigmoid",
        "activations",
        "Sigmoid",
        _TABLE2 + "Sigmoid",
        ("sigmoid",),
        ("sigmoid",),
        bench="elementwise",
    ),
    Module(
        "softmax", "rows", "Softmax", _TABLE2 + "Softmax", ("softmax",), ("softmax",), strict=True
    ),
    Module(
        "relu", "activations", "ReLU", _TABLE2 + "ReLU", ("relu",), ("relu",), bench="elementwise"
    ),
    Module(
        "gelu",
        "activations",
        "GeLU",
        _TABLE2 + "GeLU",
        ("gelu_none",),
        ("gelu", "gelu_tanh", "gelu_sigmoid"),
        variants=("none", "tanh", "sigmoid"),
        bench="elementwise",
    ),
    Module(
        "swish",
        "activations",
        "Swish",
        _TABLE2 + "Swish",
        ("swish",),
        ("swish",),
        bench="elementwise",
    ),
    Module(
        "dp_attention",
        "attention",
        "Dot-product attention",
        _TABLE2 + "Dot-Product Attention",
        ("dp_attention",),
        ("dp_attention",),
        strict=True,
        bench="attention",
    ),
    Module(
        "l2_attention",
        "attention",
        "L2 attention",
        _TABLE2 + "L2 Attention",
        ("l2_attention",),
        ("l2_attention",),
        bench="attention",
    ),
    Module(
        "scs_attention",
        "attention",
        "Scaled cosine similarity attention",
        _TABLE2 + "Scaled Cosine Similarity Attention",
        ("scs_attention",),
        ("scs_attention",),
        bench="attention",
    ),
    Module(
        "layernorm",
        "norms",
        "LayerNorm",
        _TABLE2 + "LayerNorm",
        ("layernorm",),
        ("layernorm",),
        strict=True,
    ),
    Module(
        "batchnorm",
        "batchnorm",
        "BatchNorm",
        _TABLE2 + "BatchNorm",
        ("batchnorm",),
        ("batchnorm",),
        strict=True,
    ),
    Module(
        "weightnorm",
        "norms",
        "WeightNorm",
        _TABLE2 + "WeightNorm",
        ("weightnorm",),
        ("weightnorm",),
        strict=True,
    ),
    Module(
        "rmsnorm", "norms", "RMSNorm", _TABLE2 + "RMSNorm", ("rmsnorm",), ("rmsnorm",), strict=True
    ),
    Module(
        "centernorm",
        "norms",
        "CenterNorm",
        _TABLE2 + "CenterNorm",
        ("centernorm", "normalization"),
        ("centernorm",),
        strict=True,
        extra_sections=("normalization",),
    ),
    Module(
        "residual",
        "rows",
        "Residual",
        _TABLE2 + "Residual Connection",
        ("residual",),
        ("residual",),
        bench="residual",
    ),
    Module(
        "weighted_residual",
        "rows",
        "Weighted residual",
        _TABLE2 + "Weighted Residual Connection",
        ("weighted_residual",),
        ("weighted_residual",),
        bench="residual",
    ),
    Module(
        "maxpool",
        "rows",
        "MaxPooling",
        _TABLE2 + "MaxPooling",
        ("maxpool",),
        ("maxpool",),
        bench="pool",
    ),
    Module(
        "avgpool",
        "rows",
        "AveragePooling",
        _TABLE2 + "AveragePooling",
        ("avgpool",),
        ("avgpool",),
        bench="pool",
    ),
)

KEYS: tuple[str, ...] = tuple(m.key for m in CATALOG)


def entry(key: str) -> Module:
    """The catalog entry of ``key``; a ``KeyError`` lists the known keys."""
    for module in CATALOG:
        if module.key == key:
            return module
    raise KeyError(f"no module {key!r} in the catalog; known: {', '.join(KEYS)}")


@dataclass(frozen=True)
class Topic:
    """A report section for statements about no single module (an optimizer's update, a
    smoothness definition): ``key`` its section name and claim key, ``family`` the file name
    of its definitions, checker, proofs and report text. No kernel; sections follow the
    modules'."""

    key: str
    family: str
    title: str
    source: str

    @property
    def sections(self) -> tuple[str, ...]:
        return (self.key,)

    @property
    def claim_keys(self) -> tuple[str, ...]:
        return (self.key,)

    @property
    def definition(self) -> str:
        return f"derive.definitions.{self.family}"

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"{self.key}: family {self.family!r} is not one of {FAMILIES}")


#: The topics, after the modules in the report.
TOPICS: tuple[Topic, ...] = (
    Topic(
        key="optimizers",
        family="theory",
        title="Optimizers: the size of Adam's update",
        source="001_76ce3a8a4b6079c3.txt, Algorithm 2, section 6.3, Remark 6.3 and section "
        "7.1 (guideline 4)",
    ),
    Topic(
        key="smoothness",
        family="theory",
        title="Lipschitz continuity and smoothness: the examples of 000 and 002",
        source="000_fd3535166428b448.txt, Appendix: Lipschitz Continuous and Lipschitz Smooth; "
        "002_665588f2644db48a.txt, L-Lipschitz and beta-smooth",
    ),
    Topic(
        key="backprop",
        family="initialization",
        title="Backpropagation through a product and the activations of 003",
        source="003_54d3154625e0c3ca.txt, first page (W = XY) and the activations "
        "(Sigmoid, tanh, ReLU)",
    ),
    Topic(
        key="initialization",
        family="initialization",
        title="Initialization: Xavier, Kaiming, orthogonal, spectral and depth-aware",
        source="003_54d3154625e0c3ca.txt, Xavier Init and Xavier Init -> ReLU; "
        "001_76ce3a8a4b6079c3.txt, section 3.4 (Eq. 34-35, Figure 3), section 5.5 (Table 3, "
        "Remark 5.5)",
    ),
    Topic(
        key="lipschitz_foundations",
        family="descent",
        title="Lipschitz continuity and smoothness: the lemmas and examples of 001, 000's "
        "lemma, and the sources' definitions compared",
        source="001_76ce3a8a4b6079c3.txt, section 2 (Definitions 1-5, Lemmas 1-2, Eq. 4, "
        "Example 1, Remark 2.1) and section 4.1 (Lemma 3, Eq. 45-46); 000_fd3535166428b448.txt, "
        "Appendix; 002_665588f2644db48a.txt, L-Lipschitz and beta-smooth",
    ),
    Topic(
        key="descent",
        family="descent",
        title="Gradient descent and SGD: the descent lemma and the 1/sqrt(T) rate",
        source="003_54d3154625e0c3ca.txt, 'GD (Gradient Descent)', 'Gradient Descent!', "
        "Lemma 3.1 with its proof, and SGD; 002_665588f2644db48a.txt, the update step",
    ),
    Topic(
        key="momentum",
        family="updates",
        title="Momentum: 004's running averages and 001's SGD with momentum",
        source="004_a581282367ea7257.txt, appendix B.1.1 and B.1.4.2 (B.17-B.20, B.31-B.35, "
        "Definition 7, Concept 15); 001_76ce3a8a4b6079c3.txt, section 3.5 (Eq. 36-37, "
        "Algorithm 1)",
    ),
    Topic(
        key="adaptive",
        family="updates",
        title="Adaptive step sizes: 004's Adadelta and Adam, 001's AdamW",
        source="004_a581282367ea7257.txt, appendix B.1.2-B.1.4 (B.21-B.30, B.36, Definitions "
        "11 and 16); 001_76ce3a8a4b6079c3.txt, Algorithm 2 (lines 3-7, 9-10)",
    ),
    Topic(
        key="mixed_precision",
        family="updates",
        title="Mixed precision: the FP16 and FP32 numbers of 001",
        source="001_76ce3a8a4b6079c3.txt, section 3.7 (Eq. 38)",
    ),
)

#: The report's sections, in order (``liptable report --modules`` takes these names).
SECTIONS: tuple[str, ...] = tuple(s for m in (*CATALOG, *TOPICS) for s in m.sections)


def family_of_claim(claim_key: str) -> str:
    """The family whose checker decides the claims with ``Claim.key == claim_key``."""
    return section_entry(claim_key).family


def section_entry(name: str) -> Module | Topic:
    """The entry (a module or a topic) whose report sections or claim keys include
    ``name``."""
    for module in (*CATALOG, *TOPICS):
        if name in module.sections or name in module.claim_keys:
            return module
    raise KeyError(f"no catalog entry has a section or claims named {name!r}")


def envelope_keys() -> tuple[str, ...]:
    """Every ``liptable envelope`` module name, in the catalog's order."""
    return tuple(name for m in CATALOG for name in m.envelopes)


def strict_keys() -> tuple[str, ...]:
    """The modules whose strict half-precision thresholds are predicted."""
    return tuple(m.key for m in CATALOG if m.strict)
