"""SAM 2.1 (Meta, Apache-2.0) on Spirula's neural-network runtime (spirula/nn/; issue 41).

So far the image encoder's trunk, Hiera (:mod:`spirula.sam.hiera`): its blocks laid out from
a configuration as SAM 2's code lays them out, its weights read by their checkpoint names,
its forward pass recorded into one sequence. The float64 reference is
:mod:`spirula.reference.sam`; docs/sam.md says what exists and what does not yet.
"""
