# One image for the REST API and the search page (docker-compose.yml runs it as `api` and `ui`): the project
# installed by scripts/install.sh --no-test, the runtime alone (no pytest, selenium or Hayhooks).
FROM python:3.11-slim

WORKDIR /app
COPY . .
# CPU torch from PyTorch's CPU index first (PyPI's torch pulls CUDA); install.sh then finds it installed.
RUN python -m venv .venv \
 && .venv/bin/pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && bash scripts/install.sh --no-test \
 && useradd --create-home qa \
 && mkdir -p /data/qa_home /data/documents && chown qa /data/qa_home

# Your documents are mounted read-only at /data/documents (docker-compose.yml: QA_DATA); indexes, the ONNX
# cache and feedback live in /data/qa_home (a volume). No SubjQA is needed: QA_DATA_DIR names it when you have it.
ENV PATH=/app/.venv/bin:$PATH QA_DATA_DIR=/data/documents/subjqa QA_HOME=/data/qa_home PYTHONUNBUFFERED=1
USER qa
EXPOSE 8000 8501
# Indexes QA_DOCUMENTS into QA_COLLECTION first when both are set, then runs the command.
ENTRYPOINT ["sh", "/app/scripts/docker_entrypoint.sh"]
CMD ["qa-system", "api", "--host", "0.0.0.0", "--port", "8000"]
