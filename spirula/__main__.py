from spirula.cli.main import main

main()
