#!/bin/bash
mkdir -p /logs/artifacts
echo 42 > /logs/artifacts/answer.txt
echo "scratch work" > /app/scratch.txt
