#!/bin/bash
[ "$(cat /app/count.txt)" = 3 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
