#!/bin/bash
set -e
cat > /srv/release/build_notes.sh <<'SH'
#!/bin/bash
# Assemble NOTES.md from changes/*: one line per change, in the order of the file names.
cd "$(dirname "$0")"
echo "# Release $RELEASE" > NOTES.md
while IFS= read -r -d '' f; do
  echo "- $(head -n 1 "$f")" >> NOTES.md
done < <(find changes -maxdepth 1 -type f -print0 | sort -z)
SH
bash /srv/release/build_notes.sh
