#!/usr/bin/env bash
# Static security scan of the Bicep templates under infra/ with checkov.
#
# checkov pins an older pycep-parser than the test suite, so it lives in its
# own virtual environment, .venv-checkov/ at the repository root. The first run
# creates it; later runs reuse it and only start the scan.
#
# Exit status: 0 when every check passed or is skipped with an inline
# "// checkov:skip=ID:reason" comment inside the resource body; non-zero on a
# failed check, on a template checkov could not parse, or when nothing was
# scanned at all.
#
# Environment:
#   PYTHON          interpreter used to create the venv (default: python3)
#   CHECKOV_VENV    venv location (default: <repo>/.venv-checkov)
#   UV              uv, which installs checkov in seconds where pip takes about 25 s
#                   (default: <repo>/.venv/bin/uv, which `make deps` installs; pip without it)
set -euo pipefail

CHECKOV_VERSION="3.3.30"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CHECKOV_VENV:-$REPO_ROOT/.venv-checkov}"
STAMP="$VENV/.checkov-$CHECKOV_VERSION"
PYTHON="${PYTHON:-python3}"
UV="${UV:-$REPO_ROOT/.venv/bin/uv}"

if [[ ! -f "$STAMP" || ! -x "$VENV/bin/checkov" ]]; then
    echo "lint-infra: creating $VENV with checkov==$CHECKOV_VERSION" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    install_log="$VENV/install.log"
    if [[ -x "$UV" ]]; then
        install=("$UV" pip install --quiet --python "$VENV/bin/python")
    else
        install=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    fi
    if ! "${install[@]}" "checkov==$CHECKOV_VERSION" >"$install_log" 2>&1; then
        cat "$install_log" >&2
        echo "lint-infra: installing checkov failed; removing $VENV" >&2
        rm -rf "$VENV"
        exit 2
    fi
    touch "$STAMP"
fi

cd "$REPO_ROOT"

report="$(mktemp)"
trap 'rm -f "$report"' EXIT

status=0
"$VENV/bin/checkov" -d infra --framework bicep --skip-download --quiet --compact \
    >"$report" 2>&1 || status=$?
cat "$report"

# checkov exits 0 when a template fails to parse (it is only counted), so
# treat parsing errors, and a scan that found nothing, as failures here.
if grep -Eq 'Parsing errors: [1-9]' "$report"; then
    echo "lint-infra: checkov could not parse every template under infra/" >&2
    [[ $status -ne 0 ]] || status=3
fi
if ! grep -Eq 'Passed checks: [1-9]' "$report"; then
    echo "lint-infra: no checks passed; did checkov scan any template?" >&2
    [[ $status -ne 0 ]] || status=4
fi

if [[ $status -eq 0 ]]; then
    echo "lint-infra: OK"
else
    echo "lint-infra: FAILED (exit $status)" >&2
fi
exit "$status"
