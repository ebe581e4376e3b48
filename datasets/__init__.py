"""Captured traces: the corpus the DQN is trained on (issue 4).

* ``trace.py``     -- the format: one folder per capture, ``samples.parquet`` (the FlowSample
                      schema of ccswitch/schema.py) + ``manifest.json``; reading with validation
* ``capture.py``   -- recording from the ccswitch monitor: live, or one arm in a tbf bottleneck
* ``importers.py`` -- iperf3 JSON and tshark (pcap or fields) into the same format
* ``corpus.py``    -- the corpus builder: every run of a spec not captured yet, locally or on Ray
* ``corpus_spec.py`` -- the corpus matrix (specs/*.toml): conditions x arms x seeds, parsed and checked
* ``corpus_runs.py`` -- one run captured into its folder (tbf or testbed runner), the index corpus.json
* ``corpus_ray.py``  -- a corpus build's runs as Ray tasks on a cluster (docs/cluster.md)
* ``synthetic.py`` -- a small synthetic corpus for tests
* ``card.py``      -- the dataset card: numbers computed from a corpus into its README.md
* ``sample/``      -- the sample corpus shipped in the repository (dataset card: sample/README.md)

Command line: ``ccswitch dataset --help``.
"""
