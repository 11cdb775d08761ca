#!/usr/bin/env bash
# One stretch of a grid too long for one sitting, on a machine that may start bare each time (the GPU machine of
# issue 49, item 3; a CPU session that ends). What earlier stretches left comes in as one archive and goes out
# as one archive: nothing else needs to survive between them.
#
#     EXPERIMENT=experiments/bherd/paper/svm_cases.yaml LIMIT=480 bash scripts/grid_stretch.sh
#
# 1. Unpacks STRETCH_IN (default .data/stretch/<name>.tar.xz: carry it there), if it exists, into
#    FOLDER (default runs/reproduce/<paper>-<scale>/<name>, the folder `fedaccel reproduce <paper> --scale <scale>`
#    reads).
# 2. Runs `fedaccel experiment $EXPERIMENT --stack-arms` (STACK=--stack-seeds for less memory) into it: finished
#    cells are skipped, the others resume from their checkpoints. After LIMIT seconds it asks the grid to stop
#    (SIGINT: every run finishes its round, checkpoints and stops) and waits for it.
# 3. Packs the folder (configs, rows, checkpoints) into $OUT/<name>.tar.xz (OUT default: /tmp/stretch) and says
#    how many cells are done. When all are, `fedaccel reproduce <paper> --scale <scale> --only <name>` packs and
#    judges them.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${EXPERIMENT:?EXPERIMENT=experiments/<paper>/<scale>/<name>.yaml}" "${LIMIT:?LIMIT=seconds of this stretch}"
name=$(basename "$EXPERIMENT" .yaml)
scale=$(basename "$(dirname "$EXPERIMENT")")
paper=$(basename "$(dirname "$(dirname "$EXPERIMENT")")")
folder=${FOLDER:-runs/reproduce/$paper-$scale/$name}
archive_in=${STRETCH_IN:-.data/stretch/$name.tar.xz}
OUT=${OUT:-/tmp/stretch}
FEDACCEL=${FEDACCEL:-fedaccel}
mkdir -p "$OUT" "$(dirname "$folder")"
if [ -f "$archive_in" ]; then
  mkdir -p "$folder"
  tar -xJf "$archive_in" -C "$folder"
  echo "stretch: unpacked $archive_in into $folder"
fi
started=$SECONDS
set +e
# SIGINT once, then wait: the grid stops at the end of its round (a second SIGINT would drop that round)
timeout --foreground -s INT -k 600 "$LIMIT" $FEDACCEL experiment "$EXPERIMENT" --no-progress ${STACK:---stack-arms} \
  --out "$folder"
status=$?
set -e
tar -cJf "$OUT/$name.tar.xz" --exclude=.lock -C "$folder" .
cells=$(find "$folder" -mindepth 2 -maxdepth 2 -name summary.json | wc -l)
echo "stretch: exit $status after $((SECONDS - started)) s; $cells cells done; $OUT/$name.tar.xz" \
  "($(du -h "$OUT/$name.tar.xz" | cut -f1)): carry it as $archive_in to the next stretch"
