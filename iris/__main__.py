from iris.cli import main

main()
