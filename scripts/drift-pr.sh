#!/usr/bin/env bash
# Open a pull request with what `make drift` changed (matrices/ and locks/), through the gh CLI.
# Does nothing when nothing changed. Runs the same on a laptop (gh auth login) and in drift.yml
# (GH_TOKEN). The branch is named after the change's content, so a re-run never opens a duplicate.
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(matrices locks)
if [ -z "$(git status --porcelain -- "${paths[@]}")" ]; then
  echo "drift: matrices/ and locks/ are unchanged; no pull request" >&2
  exit 0
fi
command -v gh >/dev/null || { echo "drift: the gh CLI is not installed (https://cli.github.com)" >&2; exit 1; }
digest=$(git diff -- "${paths[@]}" | sha256sum | cut -c1-12)
branch="drift/${digest}"
if git ls-remote --exit-code --heads origin "$branch" >/dev/null 2>&1; then
  echo "drift: $branch already exists on origin; its pull request carries this change" >&2
  exit 0
fi
summary=$(git status --porcelain -- "${paths[@]}" | sed 's/^/    /')
# the rows `matrix refresh --derive-from` added, each with its lock's agreement with upstream's uv.lock
rows=$(git diff -U0 -- matrices/mbridge.toml | sed -n 's/^+release *= *"\(.*\)"$/\1/p' | tr '\n' ' ')
rows_text=""
for row in $rows; do
  rows_text+="- \`$row\`: $(python3 - "locks/$row/envbuilder.lock.json" <<'PY'
import json, sys
try:
    f = json.load(open(sys.argv[1])).get("fidelity") or {}
except OSError:
    print("not locked (see locks/STATUS.md)")
else:
    print(f"locked; {f.get('agree')} of {f.get('both')} packages agree with {f.get('target')} ({f.get('percent')}%),"
          f" differences by reason {f.get('by_reason')}" if f else "locked")
PY
)"$'\n'
done
title="drift: upstream moved"
[ -z "$rows" ] || title="drift: new rows ${rows% }"
git switch -c "$branch"
git add -- "${paths[@]}"
git -c user.name="envbuilder drift bot" -c user.email="drift-bot@users.noreply.github.com" \
  commit -q -m "$title; matrix refresh and re-locked rows" -m "$summary"
git push -q origin "$branch"
gh pr create --head "$branch" --title "$title ($(date -u +%Y-%m-%d))" --body "$(cat <<BODY
\`make drift\` (envbuilder matrix refresh --derive-from + re-lock of every row) changed:

\`\`\`
$summary
\`\`\`

Rows derived from new Megatron-Bridge releases (every fact cites its source; \`envbuilder matrix show
--release ROW\` gives each fact's status, \`envbuilder matrix compare --release ROW\` the lock's differences
from upstream's own uv.lock):
${rows_text:-none}

Review the derived and drafted facts and the lock diffs; the nightly job certifies the new locks once this
is merged.
BODY
)"
