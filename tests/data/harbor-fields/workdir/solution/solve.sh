#!/bin/bash
# Relative paths: the working directory is [environment] workdir, not the image's WORKDIR.
wc -l < input.txt | tr -d ' ' > count.txt
