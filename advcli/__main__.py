from advcli.cli import main

main()
