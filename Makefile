# The two entry points a newcomer needs; everything else lives in scripts/.
.PHONY: run test
run:
	scripts/run.sh
test:
	scripts/test.sh
