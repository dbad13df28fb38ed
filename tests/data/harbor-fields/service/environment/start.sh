#!/bin/sh
# The task's service: up two seconds after the container starts (a real one loads data first).
(sleep 2 && httpd -p 127.0.0.1:8080 -h /srv/www) &
exec "$@"
