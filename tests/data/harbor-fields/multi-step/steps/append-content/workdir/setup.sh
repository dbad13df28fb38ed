#!/bin/bash
# Runs in the working directory before this step's agent; next-word.txt arrived with it.
test -f next-word.txt && echo "setup ran" > /app/.setup-done
