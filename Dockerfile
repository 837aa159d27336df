# Multi-stage build of the jobvault programs (webhook, archiver, apiserver) as static binaries on a distroless, non-root base.
# No secrets are baked in: credentials come from the environment or mounted files at run time.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY pkg/ pkg/
COPY webhook/ webhook/
COPY archiver/ archiver/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/webhook ./webhook && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/archiver ./archiver && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/apiserver ./archiver/apiserver

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/webhook /out/archiver /out/apiserver /usr/local/bin/
USER 65532:65532
# The Deployments choose the program with `command:`; the archiver is the default.
ENTRYPOINT ["/usr/local/bin/archiver"]
