#!/usr/bin/env bash
# test_adversarial.sh <qwen-conform> <source-dir>: the adversarial suite, tests/adversarial/run.sh
exec bash "$2/tests/adversarial/run.sh" "$1" "$2"
