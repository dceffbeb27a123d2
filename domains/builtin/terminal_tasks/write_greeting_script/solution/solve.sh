#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
cat > greet.sh <<'EOF'
#!/usr/bin/env bash
echo "Hello, ${1:-World}!"
EOF
chmod +x greet.sh
