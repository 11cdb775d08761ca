#!/usr/bin/env bash
# Installs everything fedaccel needs into ./.venv, on a fresh Debian machine with Python, pip and apt:
# the CPU build of torch (pinned: an unpinned torch pulls a multi-GB CUDA build), fedaccel with its
# test, Flower (flwr 1.42 with Ray), TensorBoard, docs (MkDocs) and privacy (dp-accounting, Opacus) extras, and the embedded dataset (Debian's dataset-fashion-mnist).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing python3-venv with apt-get"
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      "$PYTHON" -m venv "$VENV"
    else
      echo "error: '$PYTHON -m venv' failed; install the python3-venv package (apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
echo "[1/3] torch 2.13.0, the CPU build"
"${PIP[@]}" install "torch==2.13.0"
echo "[2/3] fedaccel and its extras: test, flower (flwr 1.42, Ray), tensorboard, docs, privacy"
"${PIP[@]}" install -e ".[test,flower,tensorboard,docs,privacy]"
echo "[3/3] the embedded dataset (Fashion-MNIST, Debian's dataset-fashion-mnist)"
"$VENV/bin/fedaccel" data --install >/dev/null
echo "installed: $VENV/bin/fedaccel ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
