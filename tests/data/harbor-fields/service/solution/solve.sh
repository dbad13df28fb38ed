#!/bin/bash
wget -q -O /app/status.txt http://127.0.0.1:8080/status
