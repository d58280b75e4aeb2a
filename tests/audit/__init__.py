"""The standing adversarial audit: tests that iterate the project's registries (kinds, mechanisms, claim
surfaces, published intervals), so a new mechanism or kind is audited without a test written for it.

* ``test_wire_ldp``: eps-LDP of what every client sends (value and bit cells of the wire fields);
* ``test_claims``: every central-DP claim surface recomputed from the accountant on adversarial inputs;
* ``test_intervals``: coverage of the published intervals, after selection where the view selects.

``clients`` holds, per kind of task, how its client encodes a chosen input and the worst input pairs;
docs/testing.md ("The adversarial audit") states the bar and how a mechanism declares an exemption.
"""
