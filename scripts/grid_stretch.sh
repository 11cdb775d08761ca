#!/usr/bin/env bash
# One stretch of a grid too long for one sitting, on a machine that may start bare each time (the GPU machine of
# issue 49, item 3; a CPU session that ends). What earlier stretches left comes in as one archive and goes out
# as one archive: nothing else needs to survive between them.
#
#     EXPERIMENT=experiments/bherd/paper/svm_cases.yaml LIMIT=480 bash scripts/grid_stretch.sh
#
# 1. Unpacks STRETCH_IN (default .data/stretch/<name>.tar.xz: carry it there), if it exists, into FOLDER (default
#    runs/reproduce/<paper>-<scale>/<name>, the folder `fedaccel reproduce <paper> --scale <scale>` reads) when that
#    folder is empty or absent; a folder already there is newer than any archive and is kept.
#    The finished cells committed beside the experiment file (CARRIED, default carried/<name>.jsonl.xz there, written
#    by `fedaccel pack`) are written into it too, those whose folder is not there (`fedaccel experiment --from`).
# 2. Runs `fedaccel experiment $EXPERIMENT` into it, stacked (STACK: --stack-arms where torch sees a GPU, else
#    --stack-seeds, which holds one cell's seeds in memory at a time): finished cells are skipped, the others resume
#    from their checkpoints. After LIMIT seconds it asks the grid to stop (SIGINT: every run finishes its round,
#    checkpoints and stops) and waits for it.
# 3. Packs the folder (configs, rows, checkpoints) into $OUT/<name>.tar.xz (OUT default: /tmp/stretch) and says
#    how many cells are done; exits with the grid's status (0 also when stopped at the limit). When every cell is
#    done, `fedaccel reproduce <paper> --scale <scale> --only <name>` packs and judges them.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${EXPERIMENT:?EXPERIMENT=experiments/<paper>/<scale>/<name>.yaml}" "${LIMIT:?LIMIT=seconds of this stretch}"
name=$(basename "$EXPERIMENT" .yaml)
scale=$(basename "$(dirname "$EXPERIMENT")")
paper=$(basename "$(dirname "$(dirname "$EXPERIMENT")")")
folder=${FOLDER:-runs/reproduce/$paper-$scale/$name}
archive_in=${STRETCH_IN:-.data/stretch/$name.tar.xz}
carried=${CARRIED:-$(dirname "$EXPERIMENT")/carried/$name.jsonl.xz}
OUT=${OUT:-/tmp/stretch}
FEDACCEL=${FEDACCEL:-fedaccel}
mkdir -p "$OUT" "$folder"
if [ -f "$archive_in" ] && [ -z "$(ls -A "$folder")" ]; then
  tar -xJf "$archive_in" -C "$folder"
  echo "stretch: unpacked $archive_in into $folder"
elif [ -f "$archive_in" ]; then
  echo "stretch: $folder is not empty: it is kept, $archive_in is not unpacked over it"
fi
if [ -z "${STACK:-}" ]; then
  STACK=--stack-seeds
  if python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then STACK=--stack-arms; fi
fi
from=()
if [ -f "$carried" ]; then from=(--from "$carried"); fi
started=$SECONDS
set +e
# SIGINT once, then wait: the grid stops at the end of its round (a second SIGINT would drop that round)
timeout --foreground -s INT -k 600 "$LIMIT" $FEDACCEL experiment "$EXPERIMENT" "$STACK" --out "$folder" "${from[@]}"
status=$?
set -e
tar -cJf "$OUT/$name.tar.xz" --exclude=.lock -C "$folder" .
cells=$(find "$folder" -mindepth 2 -maxdepth 2 -name summary.json | wc -l)
echo "stretch: exit $status after $((SECONDS - started)) s ($STACK); $cells cells done; $OUT/$name.tar.xz" \
  "($(du -h "$OUT/$name.tar.xz" | cut -f1)): carry it as $archive_in to the next stretch"
case $status in 0|124) ;; *) exit "$status" ;; esac  # 124: stopped at the limit, every run checkpointed
