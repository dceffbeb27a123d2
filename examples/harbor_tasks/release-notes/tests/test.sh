#!/bin/bash
# Fresh image + the agent's /srv/release: the notes must be right, and the script must rebuild them
# for another version and a change added now.
set -u
cd /srv/release
expected() {
  echo "# Release $1"
  find changes -maxdepth 1 -type f -print0 | sort -z | while IFS= read -r -d '' f; do echo "- $(head -n 1 "$f")"; done
}
ok=1
[ "$(cat NOTES.md 2>/dev/null)" = "$(expected 2.4.0)" ] || { echo "NOTES.md is not right"; ok=0; }
printf 'Late fix\n' > "changes/075 late.txt"
RELEASE=9.9.9 bash build_notes.sh
[ "$(cat NOTES.md 2>/dev/null)" = "$(expected 9.9.9)" ] || { echo "the script does not rebuild the notes"; ok=0; }
echo "$ok" > /logs/verifier/reward.txt
