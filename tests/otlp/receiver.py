"""A minimal OTLP/HTTP metrics receiver for the tests, built on the reference protobuf
definitions (PyPI's opentelemetry-proto): decodes every POST to /v1/metrics as an
ExportMetricsServiceRequest and appends one JSON line per histogram data point to the file given,
with the metric name, attributes, count, sum, bounds, bucket counts, start and time.

usage: receiver.py PORT OUT.jsonl
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

PORT, OUT = int(sys.argv[1]), sys.argv[2]


def attrs(kvs):
    return {kv.key: kv.value.string_value for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        ok = self.path == "/v1/metrics" and self.headers.get("Content-Type") == "application/x-protobuf"
        lines = []
        if ok:
            req = ExportMetricsServiceRequest()
            req.ParseFromString(body)
            for rm in req.resource_metrics:
                res = attrs(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        if kind == "histogram":
                            for p in m.histogram.data_points:
                                lines.append({
                                    "metric": m.name, "unit": m.unit, "resource": res,
                                    "attributes": attrs(p.attributes), "count": p.count,
                                    "sum": p.sum, "bounds": list(p.explicit_bounds),
                                    "buckets": list(p.bucket_counts),
                                    "temporality": m.histogram.aggregation_temporality,
                                    "start": p.start_time_unix_nano, "time": p.time_unix_nano,
                                })
                        elif kind == "sum":
                            for p in m.sum.data_points:
                                lines.append({"metric": m.name, "attributes": attrs(p.attributes),
                                              "value": p.as_double, "monotonic": m.sum.is_monotonic})
        with open(OUT, "a") as f:
            for l in lines:
                f.write(json.dumps(l) + "\n")
        resp = ExportMetricsServiceResponse().SerializeToString()
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(resp)))
        self.end_headers()
        self.wfile.write(resp)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
