"""Importers: environments from other frameworks turned into what the registry loads.

- :mod:`domains.importers.harbor`: Harbor / Terminal-Bench task folders (task.toml, instruction.md,
  environment/Dockerfile, tests/test.sh, solution/solve.sh), run offline on the image their
  Dockerfile describes.
"""
