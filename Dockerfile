# privlake: a minimal image for running releases (local engine, or a Spark/Beam client).
# Build: docker build -t privlake .        Run: docker run --rm -v /data:/data privlake run /data/release.yaml
# Extras: the default image has the spark extra (PySpark, a Spark client; Java is installed for it; add beam for Beam);
# --build-arg EXTRAS=spark,filter adds torch (the filter kind), EXTRAS="" gives the local engine only.
FROM python:3.11-slim-bookworm

ARG EXTRAS="spark"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    POT_BACKEND_DISABLE_PYTORCH=1

# Java for Spark's driver JVM (PySpark launches it); nothing else from the distribution.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless=17.* \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 privlake
WORKDIR /opt/privlake
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY transforms ./transforms
COPY pipelines ./pipelines
# the project itself (its dependencies are pinned in pyproject.toml)
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}"
# the Spark driver's class archive, built where the jars are (a start about 3 s shorter; without
# PySpark it is off, and Spark starts without it if it cannot be built)
RUN python -m pipelines.engines.spark_class_archive || echo "no Spark class archive"

USER 10001
WORKDIR /home/privlake
ENTRYPOINT ["privlake"]
CMD ["--help"]
