"""ggml ops: the catalogue (``table``), the support policy (``policy``), OpenVINO translation
(``translate``) and numpy references (``reference``)."""
