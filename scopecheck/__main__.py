from scopecheck.cli import main

main()
