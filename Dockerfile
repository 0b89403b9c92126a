# The repoctx image compose.yaml builds: the whole product (`.[all]`: the service, the copilot, PostgreSQL, the
# model providers) at the versions of constraints.txt, plus git for the workers.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 repoctx && mkdir -p /var/cache/repoctx/git && chown -R repoctx /var/cache/repoctx
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY src ./src
RUN pip install --no-cache-dir -c constraints.txt '.[all]'
USER repoctx
EXPOSE 8000
CMD ["repoctx", "serve", "--host", "0.0.0.0", "--port", "8000"]
