"""Data quality: ingest (:mod:`quality.ingest`), row gates and their detectors (:mod:`quality.row_gates`,
:mod:`quality.detectors`), batch gates with Great Expectations (:mod:`quality.batch_gates`,
:mod:`quality.expectations`) and their history (:mod:`quality.gate_history`), difficulty, and the
domain self-test (:mod:`quality.domain_check`). Nothing here trains or evaluates a model."""
