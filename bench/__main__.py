import sys

if sys.argv[1:2] == ["placement"]:
    from bench.placement import main as placement

    sys.exit(placement(sys.argv[2:]))

from bench.run import main

sys.exit(main())
