"""ggml ops: the catalogue (``table``), the support policy (``policy``), the element-wise formulas
written once (``formulas``), the shared index tables (``geometry``), OpenVINO translation
(``translate``) and numpy references (``reference``)."""
