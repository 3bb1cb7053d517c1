#!/bin/sh
# The image's entrypoint (Dockerfile, docker-compose.yml): indexes QA_DOCUMENTS into the collection QA_COLLECTION, when both are set, then runs the command.
# Incremental, as `qa-system index --input` always is: a restart with an unchanged source embeds nothing and rewrites nothing.
# QA_INDEX_ARGS adds flags to that command (split at spaces), e.g. "--text-column body --item-column product".
set -eu
if [ -n "${QA_DOCUMENTS:-}" ] && [ -n "${QA_COLLECTION:-}" ]; then
  if [ ! -e "$QA_DOCUMENTS" ]; then
    echo "error: $QA_DOCUMENTS does not exist in the container. Fix: set QA_DATA to the folder that holds your documents and QA_DOCUMENTS to the file or folder in it." >&2
    exit 2
  fi
  # shellcheck disable=SC2086  # QA_INDEX_ARGS is a list of flags
  qa-system index --input "$QA_DOCUMENTS" --collection "$QA_COLLECTION" ${QA_INDEX_ARGS:-}
fi
exec "$@"
