from iris.cli.main import main

main()
