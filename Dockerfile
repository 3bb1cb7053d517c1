# One image for the REST API and the search page (docker-compose.yml runs it as `api` and `ui`):
# the project installed by scripts/install.sh, exactly as on a developer's machine.
FROM python:3.11-slim

WORKDIR /app
COPY . .
# CPU torch from PyTorch's CPU index first (PyPI's torch pulls CUDA); install.sh then finds it installed.
RUN python -m venv .venv \
 && .venv/bin/pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && bash scripts/install.sh \
 && useradd --create-home qa \
 && mkdir -p /data/qa_home && chown qa /data/qa_home

# SubjQA is mounted read-only at /data/subjqa; indexes, the ONNX cache and feedback live in /data/qa_home (a volume).
ENV PATH=/app/.venv/bin:$PATH QA_DATA_DIR=/data/subjqa QA_HOME=/data/qa_home PYTHONUNBUFFERED=1
USER qa
EXPOSE 8000 8501
CMD ["qa-system", "api", "--host", "0.0.0.0", "--port", "8000"]
