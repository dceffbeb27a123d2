#!/bin/bash
# Assemble NOTES.md from changes/*: one line per change, in the order of the file names.
cd "$(dirname "$0")"
echo "# Release $VERSION" > NOTES.md
for f in $(ls changes | sort -r); do
  echo "- $(tail -n 1 changes/$f)" >> NOTES.md
done
