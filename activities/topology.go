package activities

import "github.com/tempotrain/tempotrain/api"

// topology derives LocalRank, LocalWorldSize and NodeRank for every rank from
// the node each registered on. Nodes are numbered in order of their lowest
// rank; local ranks in rank order within a node.
func topology(peers []api.Peer) (localRank, localSize, nodeRank []int) {
	n := len(peers)
	localRank, localSize, nodeRank = make([]int, n), make([]int, n), make([]int, n)
	nodeIndex := map[string]int{}
	count := map[string]int{}
	for i, p := range peers {
		if _, ok := nodeIndex[p.Node]; !ok {
			nodeIndex[p.Node] = len(nodeIndex)
		}
		nodeRank[i] = nodeIndex[p.Node]
		localRank[i] = count[p.Node]
		count[p.Node]++
	}
	for i, p := range peers {
		localSize[i] = count[p.Node]
	}
	return localRank, localSize, nodeRank
}
