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
git switch -c "$branch"
git add -- "${paths[@]}"
git -c user.name="envbuilder drift bot" -c user.email="drift-bot@users.noreply.github.com" \
  commit -q -m "drift: upstream moved; matrix refresh and re-locked rows" -m "$summary"
git push -q origin "$branch"
gh pr create --head "$branch" --title "drift: upstream moved ($(date -u +%Y-%m-%d))" --body "$(cat <<BODY
\`make drift\` (envbuilder matrix refresh + re-lock of every row) changed:

\`\`\`
$summary
\`\`\`

Review the drafted matrix facts (each cites its source) and the lock diffs; the nightly job
certifies the new locks once this is merged.
BODY
)"
