#!/bin/bash
jq length /app/items.json > /app/count.txt
