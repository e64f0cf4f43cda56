#!/bin/bash
# The image's HEALTHCHECK: GET /healthz on the manager's own port with the
# admin key, healthy on 200 only. Bash's /dev/tcp, so the image needs no curl.
key=${ADMIN_API_KEY:-}
[ -z "$key" ] && [ -n "${ADMIN_API_KEY_FILE:-}" ] && key=$(<"$ADMIN_API_KEY_FILE")
exec 3<>/dev/tcp/127.0.0.1/"${PORT:-8000}" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\nX-API-Key: %s\r\n\r\n' "$key" >&3
read -r -t 4 _ status _ <&3 || exit 1
[ "$status" = 200 ]
