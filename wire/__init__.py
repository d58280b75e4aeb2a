"""The wire: how reports travel between clients and the aggregator, without Beam.

Imports only :mod:`ldp`, :mod:`schemas`, numpy and fastavro (``tests/test_wire_layers.py``):

* :mod:`wire.records`: Avro report records, report container files, dead letters, event-time granules;
* :mod:`wire.validate`: the server-side checks of records against a task (``ReportValidator``,
  ``TaskReportValidator``) and the decoder's payload lengths;
* :mod:`wire.decode`: the column-wise decoder of report containers (``iter_report_batches``);
* :mod:`wire.encode`: the numpy block encoder of reports (``write_reports``);
* :mod:`wire.json_form`: the JSON form of a report and its checks;
* :mod:`wire.vectors`: the byte-driven reference procedures behind the conformance vectors;
* :mod:`wire.client`: what a task's clients encode with and the parameters they read.
"""
