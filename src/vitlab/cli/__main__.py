from vitlab.cli import main

raise SystemExit(main())
