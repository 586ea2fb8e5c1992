#!/usr/bin/env python3
"""A small OTLP/HTTP trace receiver for tests/it/trace.rs: listens on 127.0.0.1 (a free port,
printed as `listening on http://ADDR`), decodes each `POST /v1/traces` body as an
ExportTraceServiceRequest with the OpenTelemetry project's own protobuf classes
(`opentelemetry-proto`), and appends one JSON line per span to OUT: its name, ids (hex),
parent id, kind, times, attributes and status, with the resource's service.name and the
instrumentation scope. Answers 200 with an empty ExportTraceServiceResponse.

    python3 tests/it/otlp_receiver.py OUT
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

OUT = sys.argv[1]


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for rs in request.resource_spans:
            resource = {a.key: value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    lines.append({
                        "path": self.path,
                        "content_type": self.headers.get("Content-Type"),
                        "service": resource.get("service.name"),
                        "scope": ss.scope.name,
                        "name": s.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "kind": s.kind,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "attributes": {a.key: value(a.value) for a in s.attributes},
                        "status": s.status.code,
                    })
        with open(OUT, "a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Receiver)
print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
